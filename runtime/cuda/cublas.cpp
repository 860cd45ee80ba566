#include "runtime/cuda/cublas.h"

#include <cstdio>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#include "dsl/error.h"
#include "jit/knobs.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/toolkit_library.h"

namespace towerjit::cuda {
namespace {

struct Loaded {
  CublasApi api;
  bool ok = false;
  std::string tried;
};

Loaded load() {
  Loaded l;
  // libcublas finds its libcublasLt next to itself (its RUNPATH is $ORIGIN).
  const ToolkitLibrary lib = open_toolkit_library({"libcublas.so.13", "libcublas.so.12", "libcublas.so"},
                                                  {"/usr/local/cuda/lib64/"});
  l.tried = lib.tried;
  if (!lib.handle) return l;
  l.api.library = lib.name;
  std::string missing;
#define TOWERJIT_CUBLAS_BIND(member, name, symbol, signature) bind_symbol(lib.handle, l.api.member, #symbol, missing);
  TOWERJIT_CUBLAS_FUNCTIONS(TOWERJIT_CUBLAS_BIND)
#undef TOWERJIT_CUBLAS_BIND
  if (!missing.empty()) {
    l.tried += " (" + l.api.library + " lacks " + missing + ")";
    return l;
  }
  l.ok = true;
  return l;
}

const Loaded& cublas() {
  static const Loaded l = load();
  return l;
}

void check_cublas(CublasStatus s, const char* call, const std::string& context,
                  std::source_location loc = std::source_location::current()) {
  if (s == 0) return;
  const char* name = cublas().api.GetStatusName ? cublas().api.GetStatusName(s) : nullptr;
  user_check(false, loc) << "cuBLAS call " << call << " failed: "
                         << (name ? name : "cublasStatus_t " + std::to_string(s)) << context;
}

int as_int(int64_t v, const std::string& what) {
  user_check(v >= 0 && v <= std::numeric_limits<int>::max(), std::source_location::current())
      << what << ": a matrix dimension of " << v << " is beyond what cuBLAS's 32-bit interface takes";
  return static_cast<int>(v);
}

}  // namespace

bool cublas_available() { return cublas().ok; }

const CublasApi& require_cublas(std::source_location loc) {
  const Loaded& l = cublas();
  user_check(l.ok, loc) << "cuBLAS not found (tried " << l.tried
                        << "); GPU matrix products need the CUDA toolkit's libcublas: install CUDA, set "
                           "CUDA_HOME to its directory, or add its lib64 to LD_LIBRARY_PATH";
  return l.api;
}

Cublas::Cublas(DeviceContext& device, const Stream& stream, std::source_location loc)
    : Cublas(device, stream, cublaslt_load(), loc) {}

Cublas::Cublas(DeviceContext& device, const Stream& stream, const CublasLtLoad& lt, std::source_location loc)
    : device_(&device) {
  const CublasApi& api = require_cublas(loc);
  const bool tf32 = knobs::allow_tf32();
  device.make_current();  // the handle belongs to the context current now
  check_cublas(api.Create(&handle_), "cublasCreate", " on " + device.str(), loc);
  check_cublas(api.SetStream(handle_, stream.handle()), "cublasSetStream", "", loc);
  check_cublas(api.SetMathMode(handle_, kCublasDefaultMath), "cublasSetMathMode", "", loc);
  workspace_ = device.allocate(kWorkspaceBytes, loc);
  check_cublas(api.SetWorkspace(handle_, reinterpret_cast<void*>(workspace_.ptr()), workspace_.bytes()),
               "cublasSetWorkspace", "", loc);
  if (lt.api) {
    lt_ = std::make_unique<CublasLt>(*lt.api, device, stream, tf32, loc);
    return;
  }
  // Still correct, only slower: FP32 SIMT GEMMs, no TF32 and no fused epilogues.
  static std::once_flag warned;
  std::call_once(warned, [&] { std::fprintf(stderr, "%s\n", cublaslt_missing_warning(lt.tried, tf32).c_str()); });
}

std::string cublaslt_missing_warning(const std::string& tried, bool tf32) {
  return "towerjit: warning: cuBLASLt not found (tried " + tried +
         "); matrix products run through cuBLAS's cublasSgemmStridedBatched instead, in FP32 only" +
         (tf32 ? " (TOWERJIT_ALLOW_TF32=on has no effect)" : "") +
         ". Install the CUDA toolkit's libcublasLt (it comes with libcublas) or add its directory to LD_LIBRARY_PATH";
}

Cublas::~Cublas() {
  lt_.reset();
  if (!handle_) return;
  try {
    device_->make_current();
    cublas().api.Destroy(handle_);
  } catch (...) {
  }
}

void Cublas::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, CUdeviceptr a, int64_t lda,
                  int64_t stride_a, CUdeviceptr b, int64_t ldb, int64_t stride_b, float beta, CUdeviceptr c,
                  int64_t ldc, int64_t stride_c, int64_t batch, const std::string& what) {
  if (m == 0 || n == 0 || batch == 0) return;
  const CublasApi& api = require_cublas();
  device_->make_current();
  const float alpha = 1.0f;
  const auto* pa = reinterpret_cast<const float*>(a);
  const auto* pb = reinterpret_cast<const float*>(b);
  auto* pc = reinterpret_cast<float*>(c);
  // Column-major view of the row-major product: C^T[n,m] = op(B)^T[n,k] op(A)^T[k,m].
  const int op_a = trans_a ? kCublasOpT : kCublasOpN, op_b = trans_b ? kCublasOpT : kCublasOpN;
  const int im = as_int(m, what), in = as_int(n, what), ik = as_int(k, what);
  const int ilda = as_int(lda, what), ildb = as_int(ldb, what), ildc = as_int(ldc, what);
  if (batch == 1) {
    check_cublas(api.Sgemm(handle_, op_b, op_a, in, im, ik, &alpha, pb, ildb, pa, ilda, &beta, pc, ildc),
                 "cublasSgemm", " for " + what);
  } else {
    check_cublas(api.SgemmStridedBatched(handle_, op_b, op_a, in, im, ik, &alpha, pb, ildb, stride_b, pa, ilda,
                                         stride_a, &beta, pc, ildc, stride_c, as_int(batch, what)),
                 "cublasSgemmStridedBatched", " for " + what);
  }
}

bool Cublas::matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, CUdeviceptr a, int64_t lda,
                    int64_t stride_a, CUdeviceptr b, int64_t ldb, int64_t stride_b, CUdeviceptr c, int64_t ldc,
                    int64_t stride_c, int64_t batch, const std::string& what, DType operands,
                    const LtEpilogue& epilogue) {
  if (epilogue.kind != kir::Epilogue::none && lt_ &&
      lt_->matmul(trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c, batch, what,
                  operands, epilogue))
    return true;
  const bool plain = epilogue.kind == kir::Epilogue::none;
  if (lt_ && lt_->matmul(trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c, batch, what,
                         operands))
    return plain;
  // cuBLAS's sgemm takes f32 only; cublasGemmEx could take 16-bit operands, but towerjit's
  // products of them are cuBLASLt's (one path to test, and the tensor cores' own).
  user_check(operands == DType::f32, std::source_location::current())
      << what << ": a matrix product of " << dtype_name(operands) << " operands [" << m << "x" << k << "] x [" << k
      << "x" << n << "] runs on cuBLASLt only, and "
      << (lt_ ? "cuBLASLt has no algorithm for this shape" : "cuBLASLt did not load (see the warning above)")
      << "; install the CUDA toolkit's cuBLASLt (libcublasLt.so.13), or keep this product in f32 on this GPU "
         "(Towers::precision({.matmul_operands = DType::f32}))";
  gemm(trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, 0.0f, c, ldc, stride_c, batch, what);
  return plain;
}

}  // namespace towerjit::cuda
