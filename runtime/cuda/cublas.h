// cuBLAS, loaded with dlopen on first use (libcublas.so.13, then .so.12, libcublas.so, then
// the same names under $CUDA_HOME/lib64 and /usr/local/cuda/lib64), for the matrix products of
// the kernel IR: MatMul with its transposes folded in, and the GEMM half of convolutions.
//
// The kernel IR is row-major; cuBLAS is column-major. A row-major C[m,n] = op(A) op(B) is the
// column-major C^T[n,m] = op(B)^T op(A)^T, which is the same bytes: so gemm() calls cuBLAS with
// the operands swapped and m and n exchanged, and nothing is copied.
//
// Declared by hand (no cublas_v2.h), as the driver API (driver_api.h); where the toolkit's
// headers are present tests_gpu/test_driver_signatures.cpp checks the declarations.
//
// The kernel IR's MatMul goes to cuBLASLt where it loads (runtime/cuda/cublaslt.h: one
// cublasLtMatmul per call, TF32 when TOWERJIT_ALLOW_TF32=on); without it, to the cuBLAS calls
// here, in FP32, after a warning once. The convolutions' GEMMs stay on cuBLAS in FP32.
// cuBLASLt's bias and activation epilogues are not used yet: the kernel IR has no MatMul with
// a fused epilogue (the fusion pass leaves bias and ReLU to a loop kernel after the product).
#pragma once

#include <cstdint>
#include <memory>
#include <source_location>
#include <string>

#include "dsl/dtype.h"
#include "jit/kir/kernel_ir.h"
#include "runtime/cuda/device.h"

typedef struct cublasContext* cublasHandle_t;

namespace towerjit::cuda {

using CublasStatus = int;  // cublasStatus_t; 0 is CUBLAS_STATUS_SUCCESS

#define TOWERJIT_CUBLAS_FUNCTIONS(X)                                                             \
  X(Create, cublasCreate, cublasCreate_v2, CublasStatus (*)(cublasHandle_t*))                    \
  X(Destroy, cublasDestroy, cublasDestroy_v2, CublasStatus (*)(cublasHandle_t))                  \
  X(GetVersion, cublasGetVersion, cublasGetVersion_v2, CublasStatus (*)(cublasHandle_t, int*))   \
  X(SetStream, cublasSetStream, cublasSetStream_v2, CublasStatus (*)(cublasHandle_t, CUstream))  \
  X(SetMathMode, cublasSetMathMode, cublasSetMathMode, CublasStatus (*)(cublasHandle_t, int))    \
  X(GetStatusName, cublasGetStatusName, cublasGetStatusName, const char* (*)(CublasStatus))      \
  X(SetWorkspace, cublasSetWorkspace, cublasSetWorkspace_v2,                                     \
    CublasStatus (*)(cublasHandle_t, void*, size_t))                                             \
  X(Sgemm, cublasSgemm, cublasSgemm_v2,                                                          \
    CublasStatus (*)(cublasHandle_t, int, int, int, int, int, const float*, const float*, int,   \
                     const float*, int, const float*, float*, int))                             \
  X(SgemmStridedBatched, cublasSgemmStridedBatched, cublasSgemmStridedBatched,                   \
    CublasStatus (*)(cublasHandle_t, int, int, int, int, int, const float*, const float*, int,   \
                     long long, const float*, int, long long, const float*, float*, int,         \
                     long long, int))

inline constexpr int kCublasOpN = 0;           // CUBLAS_OP_N
inline constexpr int kCublasOpT = 1;           // CUBLAS_OP_T
inline constexpr int kCublasDefaultMath = 0;   // CUBLAS_DEFAULT_MATH: full f32, no TF32

struct CublasApi {
#define TOWERJIT_CUBLAS_MEMBER(member, name, symbol, signature) std::type_identity_t<signature> member = nullptr;
  TOWERJIT_CUBLAS_FUNCTIONS(TOWERJIT_CUBLAS_MEMBER)
#undef TOWERJIT_CUBLAS_MEMBER
  std::string library;  // the file loaded
};

// True when cuBLAS could be loaded (loads it on the first call). Never throws.
bool cublas_available();

// The bound library; throws towerjit::Error "cuBLAS not found (tried ...)" when absent.
const CublasApi& require_cublas(std::source_location loc = std::source_location::current());

class CublasLt;
struct CublasLtLoad;

// The warning a Cublas prints, once a process, when cuBLASLt did not load (`tried`: the names
// and paths tried); `tf32`: TOWERJIT_ALLOW_TF32=on, which then has no effect.
std::string cublaslt_missing_warning(const std::string& tried, bool tf32);

// A product's epilogue as cuBLASLt runs it (kir::Epilogue): the row-major product's
// per-column bias (n floats) is, in the swapped column-major view, cuBLASLt's bias per row of D
// (its length D's row count, n), shared by every matrix of a batch (bias batch stride 0).
struct LtEpilogue {
  kir::Epilogue kind = kir::Epilogue::none;
  CUdeviceptr bias = 0;
};

// A cuBLAS handle on one device, issuing on one stream. Not copyable; use from one thread at
// a time (as the program that owns it does).
class Cublas {
 public:
  // With cuBLASLt for matmul() when cublaslt_load() found it, else a warning (once a process).

  // 4 MiB of workspace: what cuBLAS takes by default per stream before Hopper (NVIDIA's cuBLAS
  // documentation, "cuBLAS workspace"); on Hopper it would take up to 32 MiB, used by the
  // split-K kernels of some shapes, which it forgoes within 4 MiB.
  static constexpr size_t kWorkspaceBytes = size_t{4} << 20;
  Cublas(DeviceContext& device, const Stream& stream,
         std::source_location loc = std::source_location::current());
  // With the cuBLASLt `lt` says (tests pass one that did not load, to check the fallback).
  Cublas(DeviceContext& device, const Stream& stream, const CublasLtLoad& lt,
         std::source_location loc = std::source_location::current());
  ~Cublas();  // defined where CublasLt is complete
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;

  // Row-major, strided-batched: for i < batch, C_i[m,n] = op(A_i) op(B_i) + beta C_i with
  // X_i = X + i * stride_x (elements; 0 broadcasts one matrix), op = transpose when the flag
  // says, and lda / ldb / ldc the row-major leading dimensions (as CBLAS's row-major sgemm).
  // `what` names the op in errors.
  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, CUdeviceptr a, int64_t lda,
            int64_t stride_a, CUdeviceptr b, int64_t ldb, int64_t stride_b, float beta, CUdeviceptr c,
            int64_t ldc, int64_t stride_c, int64_t batch, const std::string& what);

  // The kernel IR's MatMul: as gemm() with beta 0, through cuBLASLt when it is loaded and has an
  // algorithm for the shape (TF32 when knobs::allow_tf32() said so when the handle was made),
  // else through gemm(). `operands`: the type of A and B, f32, bf16 or f16 (C is f32 always,
  // accumulated in f32); bf16 and f16 run on cuBLASLt only, and without it (or without an
  // algorithm for the shape) are a towerjit::Error naming `what`. `epilogue` (none by default):
  // cuBLASLt's bias (and ReLU) epilogue where an algorithm takes it; returns false when the
  // product ran without it (no cuBLASLt, or no algorithm with it), for the caller to apply.
  bool matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, CUdeviceptr a, int64_t lda,
              int64_t stride_a, CUdeviceptr b, int64_t ldb, int64_t stride_b, CUdeviceptr c, int64_t ldc,
              int64_t stride_c, int64_t batch, const std::string& what, DType operands = DType::f32,
              const LtEpilogue& epilogue = {});

  // The cuBLASLt handle matmul() uses; null when cuBLASLt did not load.
  const CublasLt* lt() const { return lt_.get(); }

 private:
  DeviceContext* device_;
  cublasHandle_t handle_ = nullptr;
  std::unique_ptr<CublasLt> lt_;
  // The handle's workspace, set explicitly: cuBLAS would otherwise allocate one inside a
  // CUDA graph capture, which capture forbids.
  DeviceBuffer workspace_;
};

}  // namespace towerjit::cuda
