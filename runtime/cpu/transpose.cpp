#include "runtime/cpu/transpose.h"

#include <immintrin.h>

#include <algorithm>

#include "runtime/cpu/conv_epilogue.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/vector_lanes.h"

namespace towerjit::cpujit {
namespace {

// Eight rows r[0..7] of eight floats transposed through two rounds of shuffles (pairs, then
// quads within each 128-bit half) and stored as eight columns out[k * ld_out]. A full tile
// (kEdge false) loads and stores plainly; an edge tile of rows x cols, either below 8, reads
// rows past `rows` as zeros and lanes past `cols` not at all, and writes neither columns past
// `cols` nor lanes past `rows`. `bias` (column k's at bias[k]) and `relu`: transpose_floats's
// epilogue.
template <bool kEdge>
TOWERJIT_TARGET_AVX2 inline void tile8(const float* in, int64_t rows, int64_t cols, int64_t ld_in, float* out,
                                       int64_t ld_out, const float* bias, bool relu) {
  const __m256i load = first_lanes8(cols), store = first_lanes8(rows);
  __m256 r[8], t[8];
  for (int k = 0; k < 8; ++k)
    r[k] = !kEdge ? _mm256_loadu_ps(in + k * ld_in)
           : k < rows ? _mm256_maskload_ps(in + k * ld_in, load)
                      : _mm256_setzero_ps();
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    r[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
    r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
    r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
  }
  // r[k] holds column k (low 128-bit half: rows 0-3) and column k + 4 (high half) of rows 0-3;
  // r[k + 4] the same of rows 4-7.
  __m256 column[8];
  for (int k = 0; k < 4; ++k) {
    column[k] = _mm256_permute2f128_ps(r[k], r[k + 4], 0x20);
    column[k + 4] = _mm256_permute2f128_ps(r[k], r[k + 4], 0x31);
  }
  if (bias)
    for (int k = 0; k < 8; ++k)
      if (!kEdge || k < cols) {
        column[k] = _mm256_add_ps(column[k], _mm256_broadcast_ss(bias + k));
        if (relu) column[k] = relu8(column[k]);
      }
  for (int k = 0; k < 8; ++k) {
    if (!kEdge) _mm256_storeu_ps(out + k * ld_out, column[k]);
    else if (k < cols) _mm256_maskstore_ps(out + k * ld_out, store, column[k]);
  }
}

}  // namespace

TOWERJIT_TARGET_AVX2 void transpose_floats(const float* in, int64_t rows, int64_t cols, int64_t ld_in, float* out,
                                           int64_t ld_out, const float* column_bias, bool relu) {
  const int64_t full_rows = rows / 8 * 8, full_cols = cols / 8 * 8;
  for (int64_t i = 0; i < rows; i += 8) {
    int64_t j = 0;
    if (i < full_rows)
      for (; j < full_cols; j += 8)
        tile8<false>(in + i * ld_in + j, 8, 8, ld_in, out + j * ld_out + i, ld_out,
                     column_bias ? column_bias + j : nullptr, relu);
    for (; j < cols; j += 8)
      tile8<true>(in + i * ld_in + j, std::min<int64_t>(8, rows - i), std::min<int64_t>(8, cols - j), ld_in,
                  out + j * ld_out + i, ld_out, column_bias ? column_bias + j : nullptr, relu);
  }
}

}  // namespace towerjit::cpujit
