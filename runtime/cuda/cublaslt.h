// cuBLASLt, loaded with dlopen on first use (libcublasLt.so.13, then .so.12, libcublasLt.so,
// then the same names under $CUDA_HOME/lib64 and /usr/local/cuda/lib64), for the kernel IR's
// MatMul: one cublasLtMatmul per call, strided-batched through matrix layouts, in full FP32 or,
// with TOWERJIT_ALLOW_TF32=on, on the tensor cores in TF32 (CUBLAS_COMPUTE_32F_FAST_TF32).
//
// Row-major as cublas.h: a row-major C[m,n] = op(A) op(B) is the column-major
// C^T[n,m] = op(B)^T op(A)^T, the same bytes, so the operands are swapped and nothing is copied.
//
// The algorithm is chosen once per shape (cublasLtMatmulAlgoGetHeuristic, first answer) and
// cached with its descriptors. The heuristic is restricted to CUBLASLT_REDUCTION_SCHEME_NONE:
// no split-K, so every output element is one dot product summed in one order, and with the
// same algorithm on the same GPU the bits are the same every run (cuBLAS's documented
// reproducibility holds for a fixed algorithm, workspace size and GPU; split-K's in-place and
// workspace reductions are the schemes it lets vary). The workspace is allocated once, with
// the handle (kWorkspaceBytes), before any work is queued, and never grows.
//
// Declared by hand (no cublasLt.h), as cublas.h; tests_gpu/test_driver_signatures.cpp checks the
// declarations against the toolkit's header where it is installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <source_location>
#include <string>
#include <tuple>

#include "dsl/dtype.h"
#include "runtime/cuda/cublas.h"
#include "runtime/cuda/device.h"

typedef struct cublasLtContext* cublasLtHandle_t;

namespace towerjit::cuda {

// The toolkit's semi-opaque descriptors: towerjit only holds pointers to them (created and
// destroyed by cuBLASLt) and the algorithm by value; the sizes are the header's.
struct LtMatrixLayoutOpaque { uint64_t data[8]; };
struct LtMatmulDescOpaque { uint64_t data[32]; };
struct LtMatmulPreferenceOpaque { uint64_t data[8]; };
struct LtMatmulAlgo { uint64_t data[8]; };
using LtMatrixLayout = LtMatrixLayoutOpaque*;
using LtMatmulDesc = LtMatmulDescOpaque*;
using LtMatmulPreference = LtMatmulPreferenceOpaque*;
struct LtHeuristicResult {  // cublasLtMatmulHeuristicResult_t
  LtMatmulAlgo algo;
  size_t workspace_bytes;
  CublasStatus state;
  float waves;
  int reserved[4];
};

#define TOWERJIT_CUBLASLT_FUNCTIONS(X)                                                                  \
  X(Create, cublasLtCreate, cublasLtCreate, CublasStatus (*)(cublasLtHandle_t*))                        \
  X(Destroy, cublasLtDestroy, cublasLtDestroy, CublasStatus (*)(cublasLtHandle_t))                      \
  X(GetVersion, cublasLtGetVersion, cublasLtGetVersion, size_t (*)())                                   \
  X(GetStatusName, cublasLtGetStatusName, cublasLtGetStatusName, const char* (*)(CublasStatus))         \
  X(MatmulDescCreate, cublasLtMatmulDescCreate, cublasLtMatmulDescCreate,                               \
    CublasStatus (*)(LtMatmulDesc*, int, int))                                                          \
  X(MatmulDescDestroy, cublasLtMatmulDescDestroy, cublasLtMatmulDescDestroy, CublasStatus (*)(LtMatmulDesc)) \
  X(MatmulDescSetAttribute, cublasLtMatmulDescSetAttribute, cublasLtMatmulDescSetAttribute,             \
    CublasStatus (*)(LtMatmulDesc, int, const void*, size_t))                                           \
  X(MatrixLayoutCreate, cublasLtMatrixLayoutCreate, cublasLtMatrixLayoutCreate,                         \
    CublasStatus (*)(LtMatrixLayout*, int, uint64_t, uint64_t, int64_t))                                \
  X(MatrixLayoutDestroy, cublasLtMatrixLayoutDestroy, cublasLtMatrixLayoutDestroy,                      \
    CublasStatus (*)(LtMatrixLayout))                                                                   \
  X(MatrixLayoutSetAttribute, cublasLtMatrixLayoutSetAttribute, cublasLtMatrixLayoutSetAttribute,       \
    CublasStatus (*)(LtMatrixLayout, int, const void*, size_t))                                         \
  X(MatmulPreferenceCreate, cublasLtMatmulPreferenceCreate, cublasLtMatmulPreferenceCreate,             \
    CublasStatus (*)(LtMatmulPreference*))                                                              \
  X(MatmulPreferenceDestroy, cublasLtMatmulPreferenceDestroy, cublasLtMatmulPreferenceDestroy,          \
    CublasStatus (*)(LtMatmulPreference))                                                               \
  X(MatmulPreferenceSetAttribute, cublasLtMatmulPreferenceSetAttribute,                                 \
    cublasLtMatmulPreferenceSetAttribute, CublasStatus (*)(LtMatmulPreference, int, const void*, size_t)) \
  X(MatmulAlgoGetHeuristic, cublasLtMatmulAlgoGetHeuristic, cublasLtMatmulAlgoGetHeuristic,             \
    CublasStatus (*)(cublasLtHandle_t, LtMatmulDesc, LtMatrixLayout, LtMatrixLayout, LtMatrixLayout,    \
                     LtMatrixLayout, LtMatmulPreference, int, LtHeuristicResult*, int*))                \
  X(Matmul, cublasLtMatmul, cublasLtMatmul,                                                             \
    CublasStatus (*)(cublasLtHandle_t, LtMatmulDesc, const void*, const void*, LtMatrixLayout,          \
                     const void*, LtMatrixLayout, const void*, const void*, LtMatrixLayout, void*,      \
                     LtMatrixLayout, const LtMatmulAlgo*, void*, size_t, CUstream))

// The enum values towerjit passes (checked against the toolkit's in test_driver_signatures.cpp).
inline constexpr int kCudaR32F = 0;                 // CUDA_R_32F
inline constexpr int kCudaR16F = 2;                 // CUDA_R_16F: IEEE half
inline constexpr int kCudaR16BF = 14;               // CUDA_R_16BF: bfloat16
inline constexpr int kCublasCompute32F = 68;        // CUBLAS_COMPUTE_32F: full f32
inline constexpr int kCublasCompute32FFastTf32 = 77;  // CUBLAS_COMPUTE_32F_FAST_TF32: inputs rounded to TF32
inline constexpr int kLtDescTransA = 3;             // CUBLASLT_MATMUL_DESC_TRANSA, int32_t
inline constexpr int kLtDescTransB = 4;             // CUBLASLT_MATMUL_DESC_TRANSB, int32_t
inline constexpr int kLtDescEpilogue = 7;           // CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t
inline constexpr int kLtDescBiasPointer = 8;        // CUBLASLT_MATMUL_DESC_BIAS_POINTER, void*
inline constexpr int kLtDescBiasDataType = 26;      // CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t
inline constexpr int kLtEpilogueDefault = 1;        // CUBLASLT_EPILOGUE_DEFAULT: none
inline constexpr int kLtEpilogueBias = 4;           // CUBLASLT_EPILOGUE_BIAS: D = C + bias per row of D
inline constexpr int kLtEpilogueReluBias = 6;       // CUBLASLT_EPILOGUE_RELU_BIAS: then ReLU
inline constexpr int kLtLayoutBatchCount = 5;       // CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t
inline constexpr int kLtLayoutBatchStride = 6;      // CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, int64_t
inline constexpr int kLtPrefMaxWorkspace = 1;       // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t
inline constexpr int kLtPrefReductionMask = 3;      // CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, uint32_t
inline constexpr int kLtPrefMinAlignmentA = 5;      // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t (B, C, D: 6, 7, 8)
// CUBLASLT_REDUCTION_SCHEME_INPLACE | _COMPUTE_TYPE | _OUTPUT_TYPE (and NONE, no bit): every
// split-K scheme, each adding its parts in a fixed order (in place, the workspace holds counters
// that keep the parts in sequence; out of place, a separate reduction step), so repeatable.
inline constexpr uint32_t kLtReductionAny = 7;
inline constexpr int kCublasStatusNotSupported = 15;  // CUBLAS_STATUS_NOT_SUPPORTED

struct CublasLtApi {
#define TOWERJIT_CUBLASLT_MEMBER(member, name, symbol, signature) std::type_identity_t<signature> member = nullptr;
  TOWERJIT_CUBLASLT_FUNCTIONS(TOWERJIT_CUBLASLT_MEMBER)
#undef TOWERJIT_CUBLASLT_MEMBER
  std::string library;  // the file loaded
};

// Whether cuBLASLt could be loaded (tried once, on the first call), and what was tried.
struct CublasLtLoad {
  const CublasLtApi* api = nullptr;  // null: not loaded
  std::string tried;                 // every file tried, and the first symbol missing
};
const CublasLtLoad& cublaslt_load();

// One algorithm's plan, cached per shape. The alignments (bytes, a power of two up to 256, of
// every matrix of the batch) are part of it: cuBLASLt's heuristic assumes 256-byte aligned
// operands unless told less (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*), and an operand that is not
// (one batch of a broadcast that no stride gives, a view into the arena) needs an algorithm
// that allows it.
struct LtPlanKey {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch;
  uint32_t align_a, align_b, align_c;
  DType operands;  // A and B: f32, bf16 or f16; C is f32
  kir::Epilogue epilogue;
  uint32_t align_bias;  // the bias pointer's (the heuristic reads it), 0 without a bias
  auto tie() const {
    return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch, align_a, align_b,
                    align_c, operands, epilogue, align_bias);
  }
  bool operator<(const LtPlanKey& o) const { return tie() < o.tie(); }
};

// A cuBLASLt handle on one device issuing on one stream, with its workspace and its cache of
// plans. Not copyable; used from one thread at a time (as the program that owns it is). The
// owner waits for the stream before destroying it (CudaProgram's destructor does): the
// workspace goes back to the device's cache, which is not stream-ordered.
class CublasLt {
 public:
  // The workspace every call may use: what cuBLAS's documentation recommends on Hopper (4 MiB
  // before it), mostly for split-K's partial sums; the heuristic only proposes algorithms that
  // fit (CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES).
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  // `tf32`: compute in CUBLAS_COMPUTE_32F_FAST_TF32 (knobs::allow_tf32()).
  CublasLt(const CublasLtApi& api, DeviceContext& device, const Stream& stream, bool tf32,
           std::source_location loc = std::source_location::current());
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  // As Cublas::gemm with beta 0 (C_i = op(A_i) op(B_i), row-major, strides in elements, 0
  // broadcasting one matrix). False, having queued nothing, when cuBLASLt has no algorithm for
  // this shape (the caller then runs cuBLAS). `operands` bf16 or f16: A and B are CUDA_R_16BF
  // or CUDA_R_16F, C stays CUDA_R_32F, computed in CUBLAS_COMPUTE_32F (each product of two
  // 16-bit numbers is exact in f32; the tensor cores sum them in f32), TF32 or not. `epilogue`:
  // CUBLASLT_EPILOGUE_BIAS or RELU_BIAS with its bias; false, queuing nothing, when no
  // algorithm takes it for this shape.
  bool matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, CUdeviceptr a, int64_t lda,
              int64_t stride_a, CUdeviceptr b, int64_t ldb, int64_t stride_b, CUdeviceptr c, int64_t ldc,
              int64_t stride_c, int64_t batch, const std::string& what, DType operands = DType::f32,
              const LtEpilogue& epilogue = {});

  bool tf32() const { return tf32_; }
  // Shapes planned so far (each asked the heuristic once), and how many of them have an algorithm.
  size_t plans() const { return plans_.size(); }
  size_t heuristic_calls() const { return heuristic_calls_; }

 private:
  struct Plan {
    LtMatmulDesc desc = nullptr;
    LtMatmulPreference preference = nullptr;
    LtMatrixLayout a = nullptr, b = nullptr, c = nullptr;
    LtMatmulAlgo algo{};
    size_t workspace_bytes = 0;
    bool found = false;
  };
  Plan& plan(const LtPlanKey& key, CUdeviceptr bias, const std::string& what);
  void destroy(Plan& p);

  const CublasLtApi* api_;
  DeviceContext* device_;
  const Stream* stream_;
  bool tf32_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<LtPlanKey, Plan> plans_;
  size_t heuristic_calls_ = 0;
};

}  // namespace towerjit::cuda
