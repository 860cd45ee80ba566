#include "runtime/cpu/small_gemm.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "runtime/cpu/cpu_features.h"

namespace towerjit::cpujit {
namespace {

// C is computed in blocks of up to 6 rows and 16 columns (two vectors): 12 accumulators, the
// most that leave registers for the two B vectors and a broadcast of A among AVX2's 16, and
// enough independent sums to keep both FMA pipes busy (4-5 cycles of latency each).
constexpr int kRows = 6;
constexpr int64_t kCols = 16;

// The L2 size when the C library cannot say: 256 KiB, the smallest L2 of an AVX2 core
// (Haswell's).
constexpr long kFallbackL2Bytes = 256 * 1024;

long l2_bytes() {
  static const long bytes = [] {
    const long said = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return said > 0 ? said : kFallbackL2Bytes;
  }();
  return bytes;
}

// Where op(A)[i, p] lies: a[i * row + p * step].
struct Rows {
  const float* a;
  int64_t row, step;
};

// Where op(B)[p, j0 + 0..15] lies: 16 floats from b + p * ld (all readable), of which `cols`
// are real.
struct Panel {
  const float* b;
  int64_t ld;
  int64_t cols;
};

TOWERJIT_TARGET_AVX2 inline __m256i lanes_below(int64_t count) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(count, 0, 8))), index);
}

// C[R rows, the panel's columns] from rows a of op(A) and the panel. `Partial`: a panel of
// fewer than 16 columns, whose part of C is read and written through masks (nothing past its
// columns is touched).
template <int R, bool Partial>
TOWERJIT_TARGET_AVX2 void block(int64_t k, Rows a, Panel p, float beta, float* c, int64_t ldc) {
  __m256i mask0 = _mm256_setzero_si256(), mask1 = _mm256_setzero_si256();
  if constexpr (Partial) {
    mask0 = lanes_below(p.cols);
    mask1 = lanes_below(p.cols - 8);
  }
  __m256 acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t q = 0; q < k; ++q) {
    const float* bq = p.b + q * p.ld;
    const __m256 b0 = _mm256_loadu_ps(bq), b1 = _mm256_loadu_ps(bq + 8);
    const float* aq = a.a + q * a.step;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(aq + r * a.row);
      acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  const __m256 vbeta = _mm256_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
    if constexpr (Partial) {
      if (beta != 0.0f) {
        acc[r][0] = _mm256_fmadd_ps(vbeta, _mm256_maskload_ps(cr, mask0), acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(vbeta, _mm256_maskload_ps(cr + 8, mask1), acc[r][1]);
      }
      _mm256_maskstore_ps(cr, mask0, acc[r][0]);
      _mm256_maskstore_ps(cr + 8, mask1, acc[r][1]);
    } else {
      if (beta != 0.0f) {
        acc[r][0] = _mm256_fmadd_ps(vbeta, _mm256_loadu_ps(cr), acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(vbeta, _mm256_loadu_ps(cr + 8), acc[r][1]);
      }
      _mm256_storeu_ps(cr, acc[r][0]);
      _mm256_storeu_ps(cr + 8, acc[r][1]);
    }
  }
}

template <bool Partial>
TOWERJIT_TARGET_AVX2 void panel_rows(int64_t m, int64_t k, Rows a, Panel p, float beta, float* c, int64_t ldc) {
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows) block<kRows, Partial>(k, {a.a + i * a.row, a.row, a.step}, p, beta, c + i * ldc, ldc);
  const Rows rest{a.a + i * a.row, a.row, a.step};
  c += i * ldc;
  switch (m - i) {
    case 5: block<5, Partial>(k, rest, p, beta, c, ldc); break;
    case 4: block<4, Partial>(k, rest, p, beta, c, ldc); break;
    case 3: block<3, Partial>(k, rest, p, beta, c, ldc); break;
    case 2: block<2, Partial>(k, rest, p, beta, c, ldc); break;
    case 1: block<1, Partial>(k, rest, p, beta, c, ldc); break;
    default: break;
  }
}

}  // namespace

bool small_sgemm_applies(int64_t m, int64_t n, int64_t k) {
  if (vector_level(cpu_isa()) != CpuIsa::avx2) return false;
  // Fewer columns than a block has would leave lanes idle in every FMA: a 10-column product
  // (a classifier's logits) ran at 0.8x OpenBLAS's rate.
  if (n < kCols) return false;
  const double bytes = 4.0 * (static_cast<double>(m) * k + static_cast<double>(k) * n);
  return bytes <= static_cast<double>(l2_bytes());
}

void small_sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const Rows rows = transpose_a ? Rows{a, 1, lda} : Rows{a, lda, 1};
  // A transposed B is read a column at a time, and a last panel of fewer than 16 columns may
  // end where memory does: either is first copied into a panel of its own, one row of 16 per
  // step of k (zero past the last column). A masked load instead costs more than the copy on
  // AMD's cores: 9 against 22 GFLOP/s (OpenBLAS) at 64x10x64, measured on a Zen 2.
  thread_local std::vector<float> packed;
  for (int64_t j = 0; j < n; j += kCols) {
    const int64_t cols = std::min(kCols, n - j);
    Panel panel{b + j, ldb, cols};
    if (transpose_b || cols < kCols) {
      packed.assign(static_cast<size_t>(k * kCols), 0.0f);
      for (int64_t q = 0; q < k; ++q)
        for (int64_t jj = 0; jj < cols; ++jj)
          packed[q * kCols + jj] = transpose_b ? b[(j + jj) * ldb + q] : b[q * ldb + j + jj];
      panel = {packed.data(), kCols, cols};
    }
    if (cols == kCols)
      panel_rows<false>(m, k, rows, panel, beta, c + j, ldc);
    else
      panel_rows<true>(m, k, rows, panel, beta, c + j, ldc);
  }
}

}  // namespace towerjit::cpujit
