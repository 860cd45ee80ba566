#include "runtime/cpu/small_gemm.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "runtime/cpu/vector_lanes.h"

namespace towerjit::cpujit {
namespace {

// C is computed in blocks of R rows by two vectors of columns: at AVX2 6 rows by 16 columns, 12
// accumulators, the most that leave registers for the two B vectors and a broadcast of A among
// AVX2's 16, and enough independent sums to keep both FMA pipes busy (4-5 cycles of latency
// each); at AVX-512 12 rows by 32 columns, 24 of its 32 registers, so that each B vector loaded
// feeds 12 FMAs (a broadcast and a load a FMA pair left the load ports the limit at 8 rows).
constexpr int kRowsAvx2 = 6, kRowsAvx512 = 12;

// Cache sizes when the C library cannot say: 256 KiB of L2 and 32 KiB of L1, the smallest of an
// AVX2 core (Haswell's).
constexpr long kFallbackL2Bytes = 256 * 1024, kFallbackL1Bytes = 32 * 1024;

long cache_bytes(int name, long fallback) {
  const long said = sysconf(name);
  return said > 0 ? said : fallback;
}
long l2_bytes() {
  static const long bytes = cache_bytes(_SC_LEVEL2_CACHE_SIZE, kFallbackL2Bytes);
  return bytes;
}
long l1_bytes() {
  static const long bytes = cache_bytes(_SC_LEVEL1_DCACHE_SIZE, kFallbackL1Bytes);
  return bytes;
}

// Where op(A)[i, p] lies: a[i * row + p * step].
struct Rows {
  const float* a;
  int64_t row, step;
};

// Where op(B)[p, j0 + 0..width-1] lies: a block's width of floats from b + p * ld (all
// readable), of which `cols` are real.
struct Panel {
  const float* b;
  int64_t ld;
  int64_t cols;
};

// One instruction set's kernels: BLOCK<R, Partial> computes C[R rows, the panel's columns] from
// rows a of op(A) and the panel (`Partial`: a panel narrower than the block, whose part of C is
// read and written through masks, nothing past its columns touched); ROWS<Partial> walks a
// panel's rows in blocks of MOST. Loops over R are unrolled by pragma and the accumulators one
// flat array, which GCC keeps in registers (as in direct_conv.cpp).
#define TOWERJIT_UNROLL _Pragma("GCC unroll 32")
#define TOWERJIT_SMALL_GEMM(BLOCK, ROWS, TARGET, MOST, VEC, WIDTH, ZERO, LOAD, STORE, BROADCAST, FMA, MASKLOAD, \
                            MASKSTORE)                                                                       \
  template <int R, bool Partial>                                                                           \
  TARGET void BLOCK(int64_t k, Rows a, Panel p, float beta, float* c, int64_t ldc) {                       \
    VEC acc[2 * R];                                                                                        \
    TOWERJIT_UNROLL for (int v = 0; v < 2 * R; ++v) acc[v] = ZERO();                                       \
    for (int64_t q = 0; q < k; ++q) {                                                                      \
      const float* bq = p.b + q * p.ld;                                                                    \
      const VEC b0 = LOAD(bq), b1 = LOAD(bq + WIDTH);                                                      \
      const float* aq = a.a + q * a.step;                                                                  \
      TOWERJIT_UNROLL for (int r = 0; r < R; ++r) {                                                        \
        const VEC x = BROADCAST(aq + r * a.row);                                                           \
        acc[2 * r] = FMA(x, b0, acc[2 * r]);                                                               \
        acc[2 * r + 1] = FMA(x, b1, acc[2 * r + 1]);                                                       \
      }                                                                                                    \
    }                                                                                                      \
    const VEC vbeta = BROADCAST(&beta);                                                                    \
    TOWERJIT_UNROLL for (int v = 0; v < 2 * R; ++v) {                                                      \
      float* cv = c + (v / 2) * ldc + (v % 2) * WIDTH;                                                     \
      const int64_t cols = p.cols - (v % 2) * WIDTH;                                                       \
      if constexpr (Partial) {                                                                             \
        if (beta != 0.0f) acc[v] = FMA(vbeta, MASKLOAD(cv, cols), acc[v]);                                 \
        MASKSTORE(cv, cols, acc[v]);                                                                       \
      } else {                                                                                             \
        if (beta != 0.0f) acc[v] = FMA(vbeta, LOAD(cv), acc[v]);                                           \
        STORE(cv, acc[v]);                                                                                 \
      }                                                                                                    \
    }                                                                                                      \
  }                                                                                                        \
  template <bool Partial, int... R>                                                                        \
  void ROWS(std::integer_sequence<int, R...>, int64_t m, int64_t k, Rows a, Panel p, float beta, float* c, \
            int64_t ldc) {                                                                                 \
    using Block = void (*)(int64_t, Rows, Panel, float, float*, int64_t);                                  \
    static constexpr Block blocks[] = {BLOCK<R + 1, Partial>...};                                          \
    for (int64_t i = 0; i < m; i += MOST) {                                                                \
      const int64_t rows = std::min<int64_t>(MOST, m - i);                                                 \
      blocks[rows - 1](k, {a.a + i * a.row, a.row, a.step}, p, beta, c + i * ldc, ldc);                    \
    }                                                                                                      \
  }

TOWERJIT_SMALL_GEMM(block_avx2, rows_avx2, TOWERJIT_TARGET_AVX2, kRowsAvx2, __m256, 8, _mm256_setzero_ps,
                    _mm256_loadu_ps, _mm256_storeu_ps, _mm256_broadcast_ss, _mm256_fmadd_ps, maskload8, maskstore8)
TOWERJIT_SMALL_GEMM(block_avx512, rows_avx512, TOWERJIT_TARGET_AVX512, kRowsAvx512, __m512, 16, _mm512_setzero_ps,
                    _mm512_loadu_ps, _mm512_storeu_ps, broadcast16, _mm512_fmadd_ps, maskload16, maskstore16)

// AVX-512's blocks are 32 columns, AVX2's 16. `wide`: the level is AVX-512 (asked once a call:
// cpu_isa() reads the environment).
int64_t block_columns(bool wide) { return wide ? 32 : 16; }
bool is_wide(CpuIsa level) { return vector_level(level) == CpuIsa::avx512; }

void panel_rows(bool wide, bool partial, int64_t m, int64_t k, Rows a, Panel p, float beta, float* c, int64_t ldc) {
  if (wide) {
    constexpr auto rows = std::make_integer_sequence<int, kRowsAvx512>();
    partial ? rows_avx512<true>(rows, m, k, a, p, beta, c, ldc) : rows_avx512<false>(rows, m, k, a, p, beta, c, ldc);
  } else {
    constexpr auto rows = std::make_integer_sequence<int, kRowsAvx2>();
    partial ? rows_avx2<true>(rows, m, k, a, p, beta, c, ldc) : rows_avx2<false>(rows, m, k, a, p, beta, c, ldc);
  }
}

}  // namespace

bool small_sgemm_applies(int64_t m, int64_t n, int64_t k) {
  const CpuIsa level = vector_level(cpu_isa());
  if (level != CpuIsa::avx2 && level != CpuIsa::avx512) return false;
  // Fewer columns than a block has would leave lanes idle in every FMA: a 10-column product
  // (a classifier's logits) ran at 0.8x OpenBLAS's rate.
  if (n < block_columns(is_wide(level))) return false;
  const double bytes = 4.0 * (static_cast<double>(m) * k + static_cast<double>(k) * n);
  if (bytes > static_cast<double>(l2_bytes())) return false;
  // Where B has more than 128 columns OpenBLAS stays ahead at either level: its packed panels
  // against this kernel's strided reads of B from L2. Measured one thread at a time on a
  // Sapphire Rapids core (2 MB of L2, bench/small_gemm_bench.cpp; docs/performance.md): 0.76-0.93x
  // at 256 and 512 columns at AVX-512, 0.70-0.99x at AVX2 (mlp-large's products, against
  // OpenBLAS's Haswell kernel). A Zen 2's 512 KB L2 had kept those products from this kernel;
  // the one that fitted there, 1024x256x64, ran at 0.96x.
  if (n > 128) return false;
  // At AVX-512 OpenBLAS's SkylakeX kernels also stay ahead where both operands fit in L1 (its
  // packing is then cheap: 64x64x64 ran at 0.84x on the same core).
  if (level == CpuIsa::avx512) return bytes > static_cast<double>(l1_bytes());
  return true;
}

void small_sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const Rows rows = transpose_a ? Rows{a, 1, lda} : Rows{a, lda, 1};
  const bool wide = is_wide(cpu_isa());
  const int64_t width = block_columns(wide);
  // A transposed B is read a column at a time, and a last panel narrower than a block may end
  // where memory does: either is first copied into a panel of its own, one row of the block's
  // width per step of k (zero past the last column). A masked load instead costs more than the
  // copy on AMD's cores: 9 against 22 GFLOP/s (OpenBLAS) at 64x10x64, measured on a Zen 2.
  thread_local std::vector<float> packed;
  for (int64_t j = 0; j < n; j += width) {
    const int64_t cols = std::min(width, n - j);
    Panel panel{b + j, ldb, cols};
    if (transpose_b || cols < width) {
      packed.assign(static_cast<size_t>(k * width), 0.0f);
      for (int64_t q = 0; q < k; ++q)
        for (int64_t jj = 0; jj < cols; ++jj)
          packed[q * width + jj] = transpose_b ? b[(j + jj) * ldb + q] : b[q * ldb + j + jj];
      panel = {packed.data(), width, cols};
    }
    panel_rows(wide, cols < width, m, k, rows, panel, beta, c + j, ldc);
  }
}

}  // namespace towerjit::cpujit
