// The emulator's cuBLAS: the calls towerjit makes (runtime/cuda/cublas.h), computed on the host
// by OpenBLAS on the handle's stream, in order with the stream's other work. Column-major, as
// cuBLAS; alpha and beta are read when the call is made (host pointer mode).
#include "emulator/driver/emulated_devices.h"
#include "emulator/driver/host_blas.h"
#include "emulator/driver/launch_log.h"
#include "emulator/kernel/block_scheduler.h"

using namespace towerjit::emulator;

namespace {

struct Handle {
  CUstream stream = nullptr;
};

constexpr int kSuccess = 0, kNotInitialized = 1, kInvalidValue = 7;
int cblas_op(int cublas_op) { return cublas_op == 0 ? kCblasNoTrans : kCblasTrans; }

}  // namespace

extern "C" {

int cublasCreate_v2(Handle** h) {
  if (!host_sgemm()) return kNotInitialized;
  *h = new Handle();
  return kSuccess;
}
int cublasDestroy_v2(Handle* h) {
  delete h;
  return kSuccess;
}
int cublasGetVersion_v2(Handle*, int* v) {
  *v = 130000;
  return kSuccess;
}
int cublasSetStream_v2(Handle* h, CUstream s) {
  h->stream = s;
  return kSuccess;
}
int cublasSetMathMode(Handle*, int) { return kSuccess; }
// The workspace must be device memory of the size given (the emulator's calls use none).
int cublasSetWorkspace_v2(Handle*, void* workspace, std::size_t bytes) {
  if (bytes && !device_range(reinterpret_cast<std::uintptr_t>(workspace), bytes)) return kInvalidValue;
  return kSuccess;
}
const char* cublasGetStatusName(int status) {
  switch (status) {
    case kSuccess: return "CUBLAS_STATUS_SUCCESS";
    case kNotInitialized: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case kInvalidValue: return "CUBLAS_STATUS_INVALID_VALUE";
    default: return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}

int cublasSgemmStridedBatched(Handle* h, int ta, int tb, int m, int n, int k, const float* alpha, const float* a,
                              int lda, long long stride_a, const float* b, int ldb, long long stride_b,
                              const float* beta, float* c, int ldc, long long stride_c, int batches) {
  if (m < 0 || n < 0 || k < 0 || batches < 0) return kInvalidValue;
  // Each operand must lie in device memory: the bytes from its first to its last element.
  auto inside = [](const float* p, long long rows, long long cols, long long ld) {
    return rows == 0 || cols == 0 ||
           device_range(reinterpret_cast<std::uintptr_t>(p), sizeof(float) * static_cast<std::size_t>((cols - 1) * ld + rows));
  };
  for (int i = 0; i < batches; ++i)
    if (!inside(a + i * stride_a, ta == 0 ? m : k, ta == 0 ? k : m, lda) ||
        !inside(b + i * stride_b, tb == 0 ? k : n, tb == 0 ? n : k, ldb) || !inside(c + i * stride_c, m, n, ldc))
      return kInvalidValue;
  const float al = *alpha, be = *beta;
  Stream& stream = stream_of(h->stream);
  stream.enqueue([=, &stream] {
    for (int i = 0; i < batches; ++i)
      host_sgemm()(kCblasColMajor, cblas_op(ta), cblas_op(tb), m, n, k, al, a + i * stride_a, lda, b + i * stride_b,
                       ldb, be, c + i * stride_c, ldc);
    // 2mnk FLOPs a product; A and B read, C written (and read when beta is not 0).
    const double mm = m, nn = n, kk = k, count = batches;
    if (launch_log_enabled())
      record_launch({.name = "cublasSgemmStridedBatched", .kind = LaunchKind::library, .stream = &stream,
                     .device = device_owning(stream).index(),
                     .bytes = 4 * count * (mm * kk + kk * nn + (be != 0.0f ? 2 : 1) * mm * nn),
                     .flops = 2 * count * mm * nn * kk, .gemm = {m, n, k, batches}});
  });
  return kSuccess;
}

int cublasSgemm_v2(Handle* h, int ta, int tb, int m, int n, int k, const float* alpha, const float* a, int lda,
                   const float* b, int ldb, const float* beta, float* c, int ldc) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

}  // extern "C"
