#include "runtime/cpu/packed_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/transpose.h"
#include "runtime/cpu/vector_lanes.h"

namespace towerjit::cpujit {
namespace {

// The register block: kRows rows of C by kCols columns, two vectors a row. Each step of k loads
// two vectors of B and broadcasts 12 floats of A for 24 FMAs, which leaves the load ports room.
constexpr int kRows = 12, kCols = 32;

// The cache blocks. A block of A (12 rows by kDepth steps, 18 KiB) stays in the L1 cache while
// it runs across every panel of B packed with it; B is packed kDepth steps by kWidth columns at
// a time (768 KiB), which stays in a Sapphire Rapids core's 2 MiB L2 while every block of A
// passes over it.
constexpr int64_t kDepth = 384, kWidth = 512;

// Where a packed block of A keeps element (row r, step q): [q * kStep + r * kRow]. Row-major A
// (its steps contiguous) is packed row after row, each row a copy: (1, kDepth). Transposed A
// (its rows contiguous) step after step: (kRows, 1). Either is a constant offset from the
// step's pointer, so each broadcast is one instruction.
struct ByRows {
  static constexpr int64_t kStep = 1, kRow = kDepth;
};
struct BySteps {
  static constexpr int64_t kStep = kRows, kRow = 1;
};

#define TOWERJIT_UNROLL _Pragma("GCC unroll 32")

// C[R rows, a panel's columns] (= beta * C +) the product of a packed block of A and a packed
// panel of B over `depth` steps. `Partial`: a panel of fewer than kCols real columns (`cols`),
// whose part of C is read and written through masks, nothing past its columns touched.
template <int R, bool Partial, typename Layout>
TOWERJIT_TARGET_AVX512 void block(int64_t depth, const float* a, const float* b, float beta, float* c, int64_t ldc,
                                  int64_t cols) {
  __m512 acc[2 * R];
  TOWERJIT_UNROLL for (int v = 0; v < 2 * R; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t q = 0; q < depth; ++q) {
    const __m512 b0 = _mm512_load_ps(b + q * kCols), b1 = _mm512_load_ps(b + q * kCols + 16);
    const float* aq = a + q * Layout::kStep;
    TOWERJIT_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(aq[r * Layout::kRow]);
      acc[2 * r] = _mm512_fmadd_ps(x, b0, acc[2 * r]);
      acc[2 * r + 1] = _mm512_fmadd_ps(x, b1, acc[2 * r + 1]);
    }
  }
  const __m512 vbeta = _mm512_set1_ps(beta);
  TOWERJIT_UNROLL for (int v = 0; v < 2 * R; ++v) {
    float* cv = c + (v / 2) * ldc + (v % 2) * 16;
    if constexpr (Partial) {
      const int64_t lanes = cols - (v % 2) * 16;
      if (beta != 0.0f) acc[v] = _mm512_fmadd_ps(vbeta, maskload16(cv, lanes), acc[v]);
      maskstore16(cv, lanes, acc[v]);
    } else {
      if (beta != 0.0f) acc[v] = _mm512_fmadd_ps(vbeta, _mm512_loadu_ps(cv), acc[v]);
      _mm512_storeu_ps(cv, acc[v]);
    }
  }
}

using Block = void (*)(int64_t, const float*, const float*, float, float*, int64_t, int64_t);

// A layout's blocks by their number of rows (1..12), full panels and partial ones.
struct Blocks {
  std::array<Block, kRows> full, partial;
};
template <typename Layout, int... R>
constexpr Blocks blocks_of(std::integer_sequence<int, R...>) {
  return {{block<R + 1, false, Layout>...}, {block<R + 1, true, Layout>...}};
}
constexpr Blocks kByRows = blocks_of<ByRows>(std::make_integer_sequence<int, kRows>());
constexpr Blocks kBySteps = blocks_of<BySteps>(std::make_integer_sequence<int, kRows>());

// op(B)[p0 .. p0 + depth, j0 .. j0 + width] (b points at its first element) into panels of kCols
// columns, step after step: panel t at out + t * kCols * depth, columns past the last zero. A
// transposed B is packed through 8x8 transposes.
TOWERJIT_TARGET_AVX512 void pack_b(bool transposed, const float* b, int64_t ldb, int64_t depth, int64_t width,
                                   float* out) {
  for (int64_t j = 0; j < width; j += kCols) {
    const int64_t cols = std::min<int64_t>(kCols, width - j);
    float* panel = out + j * depth;
    if (transposed) {
      if (cols < kCols) std::fill(panel, panel + depth * kCols, 0.0f);
      transpose_floats(b + j * ldb, cols, depth, ldb, panel, kCols);
      continue;
    }
    for (int64_t q = 0; q < depth; ++q) {
      const float* row = b + q * ldb + j;
      _mm512_store_ps(panel + q * kCols, maskload16(row, cols));
      _mm512_store_ps(panel + q * kCols + 16, maskload16(row + 16, cols - 16));
    }
  }
}

// op(A)[i0 .. i0 + rows, p0 .. p0 + depth] (a points at its first element) into a block laid
// out as ByRows (row-major A) or BySteps (transposed A) says.
TOWERJIT_TARGET_AVX512 void pack_a(bool transposed, const float* a, int64_t lda, int64_t rows, int64_t depth,
                                   float* out) {
  if (transposed) {
    for (int64_t q = 0; q < depth; ++q)
      _mm512_mask_storeu_ps(out + q * kRows, first_lanes16(rows), maskload16(a + q * lda, rows));
    return;
  }
  for (int64_t r = 0; r < rows; ++r) std::copy(a + r * lda, a + r * lda + depth, out + r * kDepth);
}

// A thread's packed operands, on 64-byte lines so that each step of a panel is two aligned
// vectors.
struct Packed {
  std::vector<float> storage = std::vector<float>(kDepth * kWidth + kRows * kDepth + 16);
  float* b() { return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t{63}); }
  float* a() { return b() + kDepth * kWidth; }
};

// Where the sums over k are cut: `blocks` blocks as even as whole steps allow (784 steps as 261,
// 261, 262 rather than 384, 384, 16, whose last block would reload and store C for 16 steps of
// work). The bounds depend on k alone, never on the slice of C.
int64_t block_bound(int64_t k, int64_t blocks, int64_t index) { return k * index / blocks; }

// C = beta * C where the product has no depth (C not read when beta is 0, as cblas_sgemm).
void scale(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

// C = op(A) op(B) + beta C through the packed blocks (any m and n; k at least 1).
void multiply(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  thread_local Packed packed;
  float* const pb = packed.b();
  float* const pa = packed.a();
  const Blocks& blocks = transpose_a ? kBySteps : kByRows;
  const int64_t step_blocks = (k + kDepth - 1) / kDepth;
  for (int64_t j0 = 0; j0 < n; j0 += kWidth) {
    const int64_t width = std::min(kWidth, n - j0);
    for (int64_t block_index = 0; block_index < step_blocks; ++block_index) {
      const int64_t p0 = block_bound(k, step_blocks, block_index);
      const int64_t depth = block_bound(k, step_blocks, block_index + 1) - p0;
      // The first block of steps applies beta; the later ones add to what it left.
      const float beta_here = p0 == 0 ? beta : 1.0f;
      pack_b(transpose_b, transpose_b ? b + j0 * ldb + p0 : b + p0 * ldb + j0, ldb, depth, width, pb);
      for (int64_t i0 = 0; i0 < m; i0 += kRows) {
        const int64_t rows = std::min<int64_t>(kRows, m - i0);
        pack_a(transpose_a, transpose_a ? a + p0 * lda + i0 : a + i0 * lda + p0, lda, rows, depth, pa);
        for (int64_t j = 0; j < width; j += kCols) {
          const int64_t cols = std::min<int64_t>(kCols, width - j);
          (cols == kCols ? blocks.full : blocks.partial)[rows - 1](depth, pa, pb + j * depth, beta_here,
                                                                   c + i0 * ldc + j0 + j, ldc, cols);
        }
      }
    }
  }
}

// A product with fewer columns than a block (a classifier's 10 logits) would leave most lanes
// of every FMA idle: it is computed transposed instead, C^T = op(B)^T op(A)^T, whose n rows fill
// the register block's rows (10 of 12), then C = (C^T)^T + beta C. From this many columns on.
constexpr int64_t kNarrowestColumns = 8;

bool narrow(int64_t m, int64_t n) { return n < kCols && n >= kNarrowestColumns && m >= kCols; }

void multiply_narrow(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  thread_local std::vector<float> transposed;
  transposed.resize(static_cast<size_t>(n * m));
  multiply(!transpose_b, !transpose_a, n, m, k, b, ldb, a, lda, 0.0f, transposed.data(), m);
  if (beta == 0.0f) return transpose_floats(transposed.data(), n, m, m, c, ldc);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta * c[i * ldc + j] + transposed[j * m + i];
}

}  // namespace

bool packed_sgemm_applies(int64_t m, int64_t n, int64_t k) {
  if (vector_level(cpu_isa()) != CpuIsa::avx512 || k <= 0) return false;
  return (m >= kRows && n >= kCols) || narrow(m, n);
}

void packed_sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return scale(m, n, beta, c, ldc);
  if (narrow(m, n)) return multiply_narrow(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
  multiply(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace towerjit::cpujit
