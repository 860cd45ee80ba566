#include "runtime/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>

#include "runtime/cpu/blas.h"
#include "runtime/cpu/packed_gemm.h"
#include "runtime/cpu/small_gemm.h"

namespace towerjit::cpujit {
namespace {

// Below this many flops a product runs on the calling thread: waking the pool costs about
// 12 us here, what a 2-core machine spends on a 64x64x256 product.
constexpr double kSplitFlops = 4e6;

// Which kernel computes a product: decided once for the whole product, so that every slice of
// it sums alike.
enum class Kernel { small, packed, openblas };

Kernel kernel_for(int64_t m, int64_t n, int64_t k) {
  if (small_sgemm_applies(m, n, k)) return Kernel::small;
  if (packed_sgemm_applies(m, n, k)) return Kernel::packed;
  return Kernel::openblas;
}

// One single-threaded product.
void call(Kernel kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (kernel == Kernel::small) return small_sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  if (kernel == Kernel::packed) return packed_sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  blas().sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
               static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda),
               b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace

void sgemm(ThreadPool* pool, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int64_t pieces = pool ? pool->size() : 1;
  const double flops = 2.0 * m * n * k;
  const bool split_rows = m >= n;
  const int64_t extent = split_rows ? m : n;
  const Kernel kernel = kernel_for(m, n, k);
  if (pieces == 1 || flops < kSplitFlops || extent < 2 * pieces) {
    call(kernel, transpose_a, transpose_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Slice boundaries on multiples of 16 (the kernels' register blocks) when every slice still
  // gets some.
  const int64_t grain = extent >= 16 * pieces ? 16 : 1;
  const int64_t units = (extent + grain - 1) / grain;
  pool->parallel_for(pieces, [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p) {
      const int64_t lo = std::min(extent, units * p / pieces * grain);
      const int64_t hi = std::min(extent, units * (p + 1) / pieces * grain);
      if (lo >= hi) continue;
      if (split_rows)
        call(kernel, transpose_a, transpose_b, hi - lo, n, k, transpose_a ? a + lo : a + lo * lda, lda, b, ldb, beta,
             c + lo * ldc, ldc);
      else
        call(kernel, transpose_a, transpose_b, m, hi - lo, k, a, lda, transpose_b ? b + lo * ldb : b + lo, ldb, beta,
             c + lo, ldc);
    }
  });
}

}  // namespace towerjit::cpujit
