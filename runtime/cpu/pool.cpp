#include "runtime/cpu/pool.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "dsl/error.h"
#include "runtime/cpu/conv.h"
#include "runtime/cpu/conv_epilogue.h"
#include "runtime/cpu/half_spans.h"
#include "runtime/cpu/transpose.h"
#include "runtime/cpu/vector_lanes.h"

namespace towerjit::cpujit {
namespace {

struct Window {
  int64_t h, w, oh, ow, kh, kw;
  int sh, sw, ph, pw;
  // The window's rows and columns inside the image: [y0, y1) x [x0, x1).
  void clip(int64_t oy, int64_t ox, int64_t& y0, int64_t& y1, int64_t& x0, int64_t& x1) const {
    y0 = oy * sh - ph, x0 = ox * sw - pw;
    y1 = std::min(y0 + kh, h), x1 = std::min(x0 + kw, w);
    y0 = std::max<int64_t>(y0, 0), x0 = std::max<int64_t>(x0, 0);
  }
};

// Whether `v` takes the place of the window's maximum so far: strictly greater, or the first
// NaN. A NaN counts as larger than every number, so a window holding one pools to NaN and its
// gradient goes to that NaN, as the reference's (jit/reference/eval_conv.cpp) and PyTorch's.
inline bool beats(float v, float best) { return v > best || (v != v && best == best); }

// The larger of a and b, NaN if either is (std::max(a, b) drops a NaN in b). Ties give b, as
// _mm256_max_ps(a, b) does, so the AVX2 path (max_nan8) agrees bit for bit, signed zeros included.
inline float max_nan(float a, float b) { return a != a || a > b ? a : b; }

// The first maximum of the window in row-major order (what the reference's gradient follows).
int64_t argmax_in(const Window& g, const float* plane, int64_t oy, int64_t ox) {
  int64_t y0, y1, x0, x1;
  g.clip(oy, ox, y0, y1, x0, x1);
  int64_t best = y0 * g.w + x0;
  for (int64_t y = y0; y < y1; ++y)
    for (int64_t x = x0; x < x1; ++x)
      if (beats(plane[y * g.w + x], plane[best])) best = y * g.w + x;
  return best;
}

// Every window inside the image (no padding, none cut off): the common 2x2 / stride 2 case,
// without the clipping of the general path.
bool all_inside(const Window& g) {
  return g.ph == 0 && g.pw == 0 && (g.oh - 1) * g.sh + g.kh <= g.h && (g.ow - 1) * g.sw + g.kw <= g.w;
}

// The 2x2 / stride 2 pool over 8 windows of a pair of rows at once (AVX2): the rows' even and
// odd columns are the windows' left and right cells. The last windows of a row go through masks
// (a 28x28 plane pools to rows of 14 windows, a 14x14 one to rows of 7), as at AVX-512: done
// one by one, they had taken cnn's pool gradients 2.4x the time (1.33 against 0.55 ms a step on a
// Zen 4, at the memory limit now).

// The first `count` floats at p, a vector's worth or fewer. Loads of part of a vector go through
// a mask; stores through a copy, which ran a 28x28 layer's rows 1.3x as fast as the masked store
// (vmaskmovps) on one Zen 4 core.
TOWERJIT_TARGET_AVX2 inline __m256 load_first8(const float* p, int64_t count) {
  return count >= 8 ? _mm256_loadu_ps(p) : maskload8(p, count);
}
TOWERJIT_TARGET_AVX2 inline void store_first8(float* p, int64_t count, __m256 v) {
  if (count >= 8) return _mm256_storeu_ps(p, v);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  std::copy(lanes, lanes + std::max<int64_t>(count, 0), p);
}

// 2n floats at p (n <= 8 windows) -> evens [x0 x2 .. x14] and odds [x1 x3 .. x15]; lanes past n
// are zero, and nothing past p + 2n is read.
TOWERJIT_TARGET_AVX2 inline void deinterleave(const float* p, int64_t n, __m256& even, __m256& odd) {
  const __m256 a = load_first8(p, 2 * n), b = load_first8(p + 8, 2 * n - 8);
  even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
  odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

// The inverse: evens and odds back into 2n consecutive floats at p, nothing past them written.
TOWERJIT_TARGET_AVX2 inline void interleave(__m256 even, __m256 odd, int64_t n, float* p) {
  const __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
  store_first8(p, 2 * n, _mm256_permute2f128_ps(lo, hi, 0x20));
  store_first8(p + 8, 2 * n - 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}

// beats() for 8 lanes: all ones where v is greater than best, or v is NaN and best is not.
TOWERJIT_TARGET_AVX2 inline __m256 beats8(__m256 v, __m256 best) {
  const __m256 nan_v = _mm256_cmp_ps(v, v, _CMP_UNORD_Q), number_best = _mm256_cmp_ps(best, best, _CMP_ORD_Q);
  return _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_and_ps(nan_v, number_best));
}

// max_nan() for 8 lanes: _mm256_max_ps(a, b) is b when either is NaN, so a NaN a is put back.
TOWERJIT_TARGET_AVX2 inline __m256 max_nan8(__m256 a, __m256 b) {
  return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}

TOWERJIT_TARGET_AVX2 void max2x2_row_avx2(const float* r0, const float* r1, float* out, int64_t ow) {
  for (int64_t ox = 0; ox < ow; ox += 8) {
    const int64_t n = std::min<int64_t>(8, ow - ox);
    __m256 a0, a1, b0, b1;
    deinterleave(r0 + 2 * ox, n, a0, a1);
    deinterleave(r1 + 2 * ox, n, b0, b1);
    store_first8(out + ox, n, max_nan8(max_nan8(a0, a1), max_nan8(b0, b1)));
  }
}

// The gradient's row pair: dy at each window's first maximum in row-major order (the cells
// taken in turn, a later one winning only when strictly greater, as the reference), zero
// elsewhere; every cell is written.
TOWERJIT_TARGET_AVX2 void max2x2_grad_row_avx2(const float* r0, const float* r1, const float* dy, float* g0,
                                               float* g1, int64_t ow) {
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t ox = 0; ox < ow; ox += 8) {
    const int64_t n = std::min<int64_t>(8, ow - ox);
    __m256 c0, c1, c2, c3;
    deinterleave(r0 + 2 * ox, n, c0, c1);
    deinterleave(r1 + 2 * ox, n, c2, c3);
    const __m256 m1 = beats8(c1, c0);
    __m256 best = _mm256_blendv_ps(c0, c1, m1);
    const __m256 m2 = beats8(c2, best);
    best = _mm256_blendv_ps(best, c2, m2);
    const __m256 m3 = beats8(c3, best);
    const __m256 d = load_first8(dy + ox, n);
    const __m256 at3 = m3, at2 = _mm256_andnot_ps(m3, m2);
    const __m256 at1 = _mm256_andnot_ps(_mm256_or_ps(m2, m3), m1);
    const __m256 at0 = _mm256_andnot_ps(_mm256_or_ps(_mm256_or_ps(m1, m2), m3), _mm256_castsi256_ps(_mm256_set1_epi32(-1)));
    interleave(_mm256_blendv_ps(zero, d, at0), _mm256_blendv_ps(zero, d, at1), n, g0 + 2 * ox);
    interleave(_mm256_blendv_ps(zero, d, at2), _mm256_blendv_ps(zero, d, at3), n, g1 + 2 * ox);
  }
}

// The same at AVX-512, 16 windows at a time, the last windows of a row through masks.

// 2n floats at p (n <= 16 windows) -> the windows' left cells and right cells; lanes past n
// are zero.
TOWERJIT_TARGET_AVX512 inline void deinterleave16(const float* p, int64_t n, __m512& even, __m512& odd) {
  const __m512 a = _mm512_maskz_loadu_ps(first_lanes16(2 * n), p), b = _mm512_maskz_loadu_ps(first_lanes16(2 * n - 16), p + 16);
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  even = _mm512_permutex2var_ps(a, evens, b);
  odd = _mm512_permutex2var_ps(a, _mm512_add_epi32(evens, _mm512_set1_epi32(1)), b);
}

// The inverse, storing the first 2n floats at p.
TOWERJIT_TARGET_AVX512 inline void interleave16(__m512 even, __m512 odd, int64_t n, float* p) {
  const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high = _mm512_add_epi32(low, _mm512_set1_epi32(8));
  _mm512_mask_storeu_ps(p, first_lanes16(2 * n), _mm512_permutex2var_ps(even, low, odd));
  _mm512_mask_storeu_ps(p + 16, first_lanes16(2 * n - 16), _mm512_permutex2var_ps(even, high, odd));
}

// beats() and max_nan() for 16 lanes (_mm512_max_ps(a, b) is b when either is NaN, as at AVX2).
TOWERJIT_TARGET_AVX512 inline __mmask16 beats16(__m512 v, __m512 best) {
  return _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
         (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q));
}
TOWERJIT_TARGET_AVX512 inline __m512 max_nan16(__m512 a, __m512 b) {
  // (maskz with every lane set: _mm512_max_ps draws a false "uninitialised" warning from g++ 12.)
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_maskz_max_ps(0xFFFF, a, b), a);
}

TOWERJIT_TARGET_AVX512 void max2x2_row_avx512(const float* r0, const float* r1, float* out, int64_t ow) {
  for (int64_t ox = 0; ox < ow; ox += 16) {
    const int64_t n = std::min<int64_t>(16, ow - ox);
    __m512 a0, a1, b0, b1;
    deinterleave16(r0 + 2 * ox, n, a0, a1);
    deinterleave16(r1 + 2 * ox, n, b0, b1);
    _mm512_mask_storeu_ps(out + ox, first_lanes16(n), max_nan16(max_nan16(a0, a1), max_nan16(b0, b1)));
  }
}

TOWERJIT_TARGET_AVX512 void max2x2_grad_row_avx512(const float* r0, const float* r1, const float* dy, float* g0,
                                                   float* g1, int64_t ow) {
  for (int64_t ox = 0; ox < ow; ox += 16) {
    const int64_t n = std::min<int64_t>(16, ow - ox);
    __m512 c0, c1, c2, c3;
    deinterleave16(r0 + 2 * ox, n, c0, c1);
    deinterleave16(r1 + 2 * ox, n, c2, c3);
    const __mmask16 m1 = beats16(c1, c0);
    const __m512 best1 = _mm512_mask_blend_ps(m1, c0, c1);
    const __mmask16 m2 = beats16(c2, best1);
    const __mmask16 m3 = beats16(c3, _mm512_mask_blend_ps(m2, best1, c2));
    const __m512 d = _mm512_maskz_loadu_ps(first_lanes16(n), dy + ox);
    const __mmask16 at3 = m3, at2 = m2 & ~m3, at1 = m1 & ~(m2 | m3), at0 = ~(m1 | m2 | m3);
    interleave16(_mm512_maskz_mov_ps(at0, d), _mm512_maskz_mov_ps(at1, d), n, g0 + 2 * ox);
    interleave16(_mm512_maskz_mov_ps(at2, d), _mm512_maskz_mov_ps(at3, d), n, g1 + 2 * ox);
  }
}

// The widest 2x2 row kernels the level has; returns the windows they did: the whole row, or
// none below AVX2 (the caller then does them one by one).
int64_t max2x2_row(CpuIsa level, const float* r0, const float* r1, float* out, int64_t ow) {
  if (level == CpuIsa::avx512) max2x2_row_avx512(r0, r1, out, ow);
  else if (level == CpuIsa::avx2) max2x2_row_avx2(r0, r1, out, ow);
  else return 0;
  return ow;
}
int64_t max2x2_grad_row(CpuIsa level, const float* r0, const float* r1, const float* dy, float* g0, float* g1,
                        int64_t ow) {
  if (level == CpuIsa::avx512) max2x2_grad_row_avx512(r0, r1, dy, g0, g1, ow);
  else if (level == CpuIsa::avx2) max2x2_grad_row_avx2(r0, r1, dy, g0, g1, ow);
  else return 0;
  return ow;
}

// The 2x2 / stride 2 pool with each window's code (jit/passes/conv_pools.h), over `rows` pooled
// rows of `ow` windows, row r from input rows 2r and 2r + 1 of x (rows of 2 ow floats): a
// plane's rows follow the last plane's, so an image is one run. The pooled value is
// max2x2_row's; the winner, which max2x2_grad_row finds by taking the cells in turn (a later
// one where it beats the best so far), is the first cell equal to that maximum, or the first
// NaN where there is one: the same cell, found by four comparisons that do not wait on each
// other (the chain of three had bound the loop by its latency). Plus 4 where it is not > 0.
inline int32_t window_code(const float cell[4], float& pooled) {
  int best = 0;
  for (int j = 1; j < 4; ++j)
    if (beats(cell[j], cell[best])) best = j;
  pooled = max_nan(max_nan(cell[0], cell[1]), max_nan(cell[2], cell[3]));
  return best + (cell[best] > 0 ? 0 : 4);
}

// Eight windows' cells c[0..3] in row-major window order -> their maximum and their codes.
TOWERJIT_TARGET_AVX2 inline __m256i window_codes8(const __m256 c[4], __m256& best) {
  best = max_nan8(max_nan8(c[0], c[1]), max_nan8(c[2], c[3]));
  __m256i at = _mm256_set1_epi32(3);
  for (int j = 2; j >= 0; --j) {
    const __m256 wins = _mm256_or_ps(_mm256_cmp_ps(c[j], best, _CMP_EQ_OQ), _mm256_cmp_ps(c[j], c[j], _CMP_UNORD_Q));
    at = _mm256_blendv_epi8(at, _mm256_set1_epi32(j), _mm256_castps_si256(wins));
  }
  const __m256 not_positive = _mm256_cmp_ps(best, _mm256_setzero_ps(), _CMP_NGT_UQ);
  return _mm256_add_epi32(at, _mm256_and_si256(_mm256_castps_si256(not_positive), _mm256_set1_epi32(4)));
}

// The codes of a row are stored a whole vector's worth at a time where that many bytes lie
// before the image's last: what lands past the row is the next row's place, which that row
// writes over next. Then in pieces (at AVX-512 a masked vpmovdb to memory ran at a fraction of
// the rate on Zen 4: the pool took 5.6% of the cnn's samples, from 1.5% with i32 codes).
TOWERJIT_TARGET_AVX2 void max2x2_codes_avx2(const float* x, int64_t rows, int64_t ow, float* out, uint8_t* code) {
  const uint8_t* const end = code + rows * ow;
  for (int64_t row = 0; row < rows; ++row, x += 4 * ow, out += ow, code += ow)
    for (int64_t ox = 0; ox < ow; ox += 8) {
      const int64_t n = std::min<int64_t>(8, ow - ox);
      __m256 c[4], best;
      deinterleave(x + 2 * ox, n, c[0], c[1]);
      deinterleave(x + 2 * ow + 2 * ox, n, c[2], c[3]);
      const __m256i at = window_codes8(c, best);
      store_first8(out + ox, n, best);
      store_bytes8(code + ox, std::min<int64_t>(8, end - code - ox), at);
    }
}

// The same over pixels whose channels lie along the vectors (the direct convolutions' results,
// [OH*OW][ld], before their transpose to NCHW), with the epilogue's act(v + bias[c]) applied
// first (transpose_floats's float operations): every lane a channel, whatever the row's width.
TOWERJIT_TARGET_AVX2 void max2x2_codes_pixels_avx2(const float* x, int64_t oh, int64_t ow, int64_t channels,
                                                   int64_t ld, const float* bias, bool relu, float* out,
                                                   int32_t* code) {
  const int64_t pw = ow / 2;
  for (int64_t c0 = 0; c0 < channels; c0 += 8) {
    const __m256 b = bias ? maskload8(bias + c0, channels - c0) : _mm256_setzero_ps();
    for (int64_t py = 0; py < oh / 2; ++py)
      for (int64_t px = 0; px < pw; ++px) {
        const float* p = x + (2 * py * ow + 2 * px) * ld + c0;
        const float* cell[4] = {p, p + ld, p + ow * ld, p + (ow + 1) * ld};
        __m256 c[4], best;
        for (int j = 0; j < 4; ++j) {
          c[j] = _mm256_loadu_ps(cell[j]);
          if (bias) c[j] = _mm256_add_ps(c[j], b);
          if (relu) c[j] = relu8(c[j]);
        }
        const __m256i at = window_codes8(c, best);
        const int64_t o = (py * pw + px) * ld + c0;
        _mm256_storeu_ps(out + o, best);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(code + o), at);
      }
  }
}

TOWERJIT_TARGET_AVX512 void max2x2_codes_avx512(const float* x, int64_t rows, int64_t ow, float* out, uint8_t* code) {
  const uint8_t* const end = code + rows * ow;
  for (int64_t row = 0; row < rows; ++row, x += 4 * ow, out += ow, code += ow)
    for (int64_t ox = 0; ox < ow; ox += 16) {
      const int64_t n = std::min<int64_t>(16, ow - ox);
      __m512 c[4];
      deinterleave16(x + 2 * ox, n, c[0], c[1]);
      deinterleave16(x + 2 * ow + 2 * ox, n, c[2], c[3]);
      const __m512 best = max_nan16(max_nan16(c[0], c[1]), max_nan16(c[2], c[3]));
      _mm512_mask_storeu_ps(out + ox, first_lanes16(n), best);
      __m512i at = _mm512_set1_epi32(3);
      for (int j = 2; j >= 0; --j) {
        const __mmask16 wins = _mm512_cmp_ps_mask(c[j], best, _CMP_EQ_OQ) | _mm512_cmp_ps_mask(c[j], c[j], _CMP_UNORD_Q);
        at = _mm512_mask_mov_epi32(at, wins, _mm512_set1_epi32(j));
      }
      const __mmask16 not_positive = _mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_NGT_UQ);
      at = _mm512_mask_add_epi32(at, not_positive, at, _mm512_set1_epi32(4));
      store_bytes16(code + ox, std::min<int64_t>(16, end - code - ox), at);
    }
}

// The gradient routed by codes over `rows` pooled rows: dy at the coded position (with
// `relu_mask`, only a code below 4), +0 at every other cell; row r writes rows 2r and 2r + 1
// of dx (2 ow floats each, `stride` floats apart; row r + 1's 2 stride after row r's). A
// row's codes are loaded a whole vector's worth at a time where that many bytes lie before
// `end` (the codes' end): what follows a row is the next row's codes, whose lanes meet zeros
// of dy and are never stored. The last few are loaded in pieces.
TOWERJIT_TARGET_AVX2 void grad_by_codes_avx2(const uint8_t* code, const uint8_t* end, const float* dy, int64_t rows,
                                             int64_t ow, float* dx, int64_t stride, bool relu_mask) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256i position_bits = _mm256_set1_epi32(relu_mask ? -1 : 3);
  for (int64_t row = 0; row < rows; ++row, code += ow, dy += ow, dx += 2 * stride)
    for (int64_t ox = 0; ox < ow; ox += 8) {
      const int64_t n = std::min<int64_t>(8, ow - ox);
      const __m256i at = _mm256_and_si256(load_bytes8(code + ox, std::min<int64_t>(8, end - code - ox)), position_bits);
      const __m256 d = load_first8(dy + ox, n);
      __m256 to[4];  // (a lambda would not take the function's target)
      for (int j = 0; j < 4; ++j)
        to[j] = _mm256_blendv_ps(zero, d, _mm256_castsi256_ps(_mm256_cmpeq_epi32(at, _mm256_set1_epi32(j))));
      interleave(to[0], to[1], n, dx + 2 * ox);
      interleave(to[2], to[3], n, dx + stride + 2 * ox);
    }
}

TOWERJIT_TARGET_AVX512 void grad_by_codes_avx512(const uint8_t* code, const uint8_t* end, const float* dy,
                                                 int64_t rows, int64_t ow, float* dx, int64_t stride, bool relu_mask) {
  const __m512i position_bits = _mm512_set1_epi32(relu_mask ? -1 : 3);
  for (int64_t row = 0; row < rows; ++row, code += ow, dy += ow, dx += 2 * stride)
    for (int64_t ox = 0; ox < ow; ox += 16) {
      const int64_t n = std::min<int64_t>(16, ow - ox);
      const __m512i at = _mm512_and_si512(load_bytes16(code + ox, std::min<int64_t>(16, end - code - ox)), position_bits);
      const __m512 d = _mm512_maskz_loadu_ps(first_lanes16(n), dy + ox);
      __m512 to[4];
      for (int j = 0; j < 4; ++j) to[j] = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, _mm512_set1_epi32(j)), d);
      interleave16(to[0], to[1], n, dx + 2 * ox);
      interleave16(to[2], to[3], n, dx + stride + 2 * ox);
    }
}

// The routing over channels along the vectors: `points` pooled points of a plane w windows
// wide, each a row of ld floats of the transposed pooled dy `dy` and codes `code`; window q's
// four pixels are rows of `out` ([2 * h/2][2 * w][ld]), each stored whole: dy where the code
// names it, else +0.
TOWERJIT_TARGET_AVX2 void route_channels_last_avx2(const float* dy, const int32_t* code, int64_t points, int64_t w,
                                                   int64_t ld, float* out, bool relu_mask) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256i position_bits = _mm256_set1_epi32(relu_mask ? -1 : 3);
  for (int64_t q = 0; q < points; ++q, dy += ld, code += ld) {
    float* cell = out + (q / w * 4 * w + q % w * 2) * ld;
    float* const cells[4] = {cell, cell + ld, cell + 2 * w * ld, cell + (2 * w + 1) * ld};
    for (int64_t o = 0; o < ld; o += 8) {
      const __m256 d = _mm256_loadu_ps(dy + o);
      const __m256i at = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(code + o)), position_bits);
      for (int j = 0; j < 4; ++j)
        _mm256_storeu_ps(cells[j] + o,
                         _mm256_blendv_ps(zero, d, _mm256_castsi256_ps(_mm256_cmpeq_epi32(at, _mm256_set1_epi32(j)))));
    }
  }
}

TOWERJIT_TARGET_AVX512 void route_channels_last_avx512(const float* dy, const int32_t* code, int64_t points, int64_t w,
                                                       int64_t ld, float* out, bool relu_mask) {
  const __m512i position_bits = _mm512_set1_epi32(relu_mask ? -1 : 3);
  for (int64_t q = 0; q < points; ++q, dy += ld, code += ld) {
    float* cell = out + (q / w * 4 * w + q % w * 2) * ld;
    float* const cells[4] = {cell, cell + ld, cell + 2 * w * ld, cell + (2 * w + 1) * ld};
    for (int64_t o = 0; o < ld; o += 16) {
      const __m512 d = _mm512_loadu_ps(dy + o);
      const __m512i at = _mm512_and_si512(_mm512_loadu_si512(code + o), position_bits);
      for (int j = 0; j < 4; ++j)
        _mm512_storeu_ps(cells[j] + o, _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, _mm512_set1_epi32(j)), d));
    }
  }
}

// `level`: the vector level whose 2x2 row kernels run.
void max_plane_inside(const Window& g, const float* x, const float* dy, float* out, bool grad, CpuIsa level) {
  if (!grad && g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2) {
    // The usual 2x2 / stride 2 pool: two rows in, one row out, no index bookkeeping.
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      const float* r0 = x + 2 * oy * g.w;
      const float* r1 = r0 + g.w;
      float* o = out + oy * g.ow;
      for (int64_t ox = max2x2_row(level, r0, r1, o, g.ow); ox < g.ow; ++ox)
        o[ox] = max_nan(max_nan(r0[2 * ox], r0[2 * ox + 1]), max_nan(r1[2 * ox], r1[2 * ox + 1]));
    }
    return;
  }
  if (grad && g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2) {
    // Every cell of a window is written, so only what an odd size leaves outside every window
    // (a last row or column) needs zeroing.
    if (g.h != 2 * g.oh || g.w != 2 * g.ow) std::fill(out, out + g.h * g.w, 0.0f);
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      const float* r0 = x + 2 * oy * g.w;
      const float* r1 = r0 + g.w;
      float* g0 = out + 2 * oy * g.w;
      float* g1 = g0 + g.w;
      const float* d = dy + oy * g.ow;
      for (int64_t ox = max2x2_grad_row(level, r0, r1, d, g0, g1, g.ow); ox < g.ow; ++ox) {
        const float cell[4] = {r0[2 * ox], r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]};
        int best = 0;  // the first maximum in row-major order, as the reference
        for (int j = 1; j < 4; ++j)
          if (beats(cell[j], cell[best])) best = j;
        float* at[4] = {g0 + 2 * ox, g0 + 2 * ox + 1, g1 + 2 * ox, g1 + 2 * ox + 1};
        for (int j = 0; j < 4; ++j) *at[j] = j == best ? d[ox] : 0.0f;
      }
    }
    return;
  }
  if (grad) std::fill(out, out + g.h * g.w, 0.0f);
  for (int64_t oy = 0; oy < g.oh; ++oy)
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const float* corner = x + oy * g.sh * g.w + ox * g.sw;
      int64_t best = 0;  // first maximum in row-major order
      for (int64_t y = 0; y < g.kh; ++y)
        for (int64_t xx = 0; xx < g.kw; ++xx)
          if (beats(corner[y * g.w + xx], corner[best])) best = y * g.w + xx;
      if (grad) out[oy * g.sh * g.w + ox * g.sw + best] += dy[oy * g.ow + ox];
      else out[oy * g.ow + ox] = corner[best];
    }
}

// A ReLU's mask taken into the gradient (Attrs::relu_mask): nothing where the input is not > 0.
void mask_not_positive(const float* x, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0 ? dx[i] : 0.0f;
}

void pool_plane(Op op, const Window& g, const float* x, const float* dy, float* out, CpuIsa level) {
  if ((op == Op::MaxPool2D || op == Op::MaxPool2DGrad) && all_inside(g))
    return max_plane_inside(g, x, dy, out, op == Op::MaxPool2DGrad, level);
  const float inv = 1.0f / static_cast<float>(g.kh * g.kw);
  if (op == Op::MaxPool2DGrad || op == Op::AvgPool2DGrad) std::fill(out, out + g.h * g.w, 0.0f);
  for (int64_t oy = 0; oy < g.oh; ++oy)
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t o = oy * g.ow + ox;
      if (op == Op::MaxPool2D) {
        out[o] = x[argmax_in(g, x, oy, ox)];
      } else if (op == Op::MaxPool2DGrad) {
        out[argmax_in(g, x, oy, ox)] += dy[o];
      } else {
        int64_t y0, y1, x0, x1;
        g.clip(oy, ox, y0, y1, x0, x1);
        if (op == Op::AvgPool2D) {
          float sum = 0;  // padding counts as zeros in the mean
          for (int64_t y = y0; y < y1; ++y)
            for (int64_t xx = x0; xx < x1; ++xx) sum += x[y * g.w + xx];
          out[o] = sum * inv;
        } else {
          for (int64_t y = y0; y < y1; ++y)
            for (int64_t xx = x0; xx < x1; ++xx) out[y * g.w + xx] += dy[o] * inv;
        }
      }
    }
}

}  // namespace

void max_pool2x2_with_codes(const float* x, int64_t planes, int64_t h, int64_t w, float* pooled, uint8_t* codes,
                            CpuIsa level) {
  const int64_t rows = planes * (h / 2), ow = w / 2;
  if (level == CpuIsa::avx512) return max2x2_codes_avx512(x, rows, ow, pooled, codes);
  if (level == CpuIsa::avx2) return max2x2_codes_avx2(x, rows, ow, pooled, codes);
  for (int64_t row = 0; row < rows; ++row) {
    const float* r0 = x + 2 * row * w;
    const float* r1 = r0 + w;
    for (int64_t ox = 0; ox < ow; ++ox) {
      const float cell[4] = {r0[2 * ox], r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]};
      codes[row * ow + ox] = static_cast<uint8_t>(window_code(cell, pooled[row * ow + ox]));
    }
  }
}

void max_pool2x2_pixels_with_codes(const float* x, int64_t oh, int64_t ow, int64_t channels, int64_t ld,
                                   const float* bias, bool relu, float* pooled, int32_t* codes) {
  max2x2_codes_pixels_avx2(x, oh, ow, channels, ld, bias, relu, pooled, codes);
}

void narrow_codes(const int32_t* from, int64_t n, uint8_t* to) {
  for (int64_t j = 0; j < n; ++j) to[j] = static_cast<uint8_t>(from[j]);
}

RoutedPoolGradient routed_by_codes(const View& codes, const View& dy, bool relu_mask) {
  const int64_t windows = dy.shape[1] * dy.shape[2] * dy.shape[3];
  internal_check(codes.dtype == DType::i32 && dy.dtype == DType::f32 && codes.shape.rank() == 2 &&
                 codes.shape[0] == dy.shape[0] && codes.shape[1] == kir::pool_code_words(windows))
      << "a pool's codes " << codes.shape.str() << " for its pooled dy " << dy.shape.str();
  return {static_cast<const uint8_t*>(codes.data), dy.f(), codes.shape[0], dy.shape[1] * dy.shape[2],
          4 * codes.shape[1], relu_mask, vector_level(cpu_isa())};
}

namespace {

// `rows` pooled rows within one image's, codes at `code`.
void route_rows(const RoutedPoolGradient& r, const uint8_t* code, const float* dy, int64_t rows, int64_t ow,
                float* dx, int64_t stride) {
  const uint8_t* end = r.codes + r.images * r.image_bytes;
  if (r.level == CpuIsa::avx512) return grad_by_codes_avx512(code, end, dy, rows, ow, dx, stride, r.relu_mask);
  if (r.level == CpuIsa::avx2) return grad_by_codes_avx2(code, end, dy, rows, ow, dx, stride, r.relu_mask);
  for (int64_t row = 0; row < rows; ++row)  // a pooled row: two rows of dx
    for (int64_t ox = 0; ox < ow; ++ox) {
      const int to = r.relu_mask ? code[row * ow + ox] : code[row * ow + ox] & 3;
      float* g0 = dx + 2 * row * stride + 2 * ox;
      float* cells[4] = {g0, g0 + 1, g0 + stride, g0 + stride + 1};
      for (int j = 0; j < 4; ++j) *cells[j] = j == to ? dy[row * ow + ox] : 0.0f;
    }
}

}  // namespace

void route_pool_rows(const RoutedPoolGradient& r, int64_t first, int64_t rows, int64_t ow, float* dx, int64_t stride) {
  while (rows > 0) {  // a run of rows within an image at a time: each image's codes start anew
    const int64_t image = first / r.image_rows, row = first % r.image_rows;
    const int64_t run = std::min(rows, r.image_rows - row);
    route_rows(r, r.codes + image * r.image_bytes + row * ow, r.dy + first * ow, run, ow, dx, stride);
    first += run, rows -= run, dx += 2 * run * stride;
  }
}

void route_pool_image_channels_last(const RoutedPoolGradient& r, int64_t i, int64_t channels, int64_t h, int64_t w,
                                    float* out, int64_t ld, float* scratch) {
  const int64_t pw = w / 2, points = h / 2 * pw, image = channels * points;
  float* dy = scratch;
  int32_t* code = reinterpret_cast<int32_t*>(scratch + points * ld);
  int32_t* wide = code + points * ld;
  const uint8_t* bytes = r.codes + i * r.image_bytes;
  for (int64_t e = 0; e < image; ++e) wide[e] = bytes[e];
  // The columns past the channels: zero dy (and codes, read but met by those zeros).
  for (int64_t q = 0; q < points; ++q) {
    std::fill(dy + q * ld + channels, dy + (q + 1) * ld, 0.0f);
    std::fill(code + q * ld + channels, code + (q + 1) * ld, 0);
  }
  transpose_floats(r.dy + i * image, channels, points, points, dy, ld);
  // The codes' bits moved as floats: the transpose only shuffles, loads and stores them.
  transpose_floats(reinterpret_cast<const float*>(wide), channels, points, points, reinterpret_cast<float*>(code), ld);
  if (r.level == CpuIsa::avx512 && ld % 16 == 0)
    return route_channels_last_avx512(dy, code, points, pw, ld, out, r.relu_mask);
  if (r.level != CpuIsa::baseline && ld % 8 == 0) return route_channels_last_avx2(dy, code, points, pw, ld, out, r.relu_mask);
  for (int64_t q = 0; q < points; ++q)
    for (int64_t j = 0; j < 4; ++j) {
      float* cell = out + ((q / pw * 2 + j / 2) * w + q % pw * 2 + j % 2) * ld;
      for (int64_t o = 0; o < ld; ++o) {
        const int32_t c = r.relu_mask ? code[q * ld + o] : code[q * ld + o] & 3;
        cell[o] = c == j ? dy[q * ld + o] : 0.0f;
      }
    }
}

void max_pool2d_grad_by_codes(const Attrs& at, const View& codes, const View& dy, const View& dx, ThreadPool* pool) {
  internal_check(dx.dtype == DType::f32 && dx.shape[2] == 2 * dy.shape[2] && dx.shape[3] == 2 * dy.shape[3])
      << "a max pool gradient routed by codes over " << dx.shape.str();
  const RoutedPoolGradient r = routed_by_codes(codes, dy, at.relu_mask);
  const int64_t ow = dy.shape[3];
  parallel(pool, dy.shape[0] * dy.shape[1] * dy.shape[2], [&](int64_t begin, int64_t end) {
    route_pool_rows(r, begin, end - begin, ow, dx.f() + 4 * begin * ow, 2 * ow);
  });
}

void pool2d(Op op, const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool) {
  const bool grad = op == Op::MaxPool2DGrad || op == Op::AvgPool2DGrad;
  const Shape& xs = grad ? out.shape : in[0].shape;
  const Shape& ys = grad ? in.back().shape : out.shape;
  const Window g{xs[2], xs[3], ys[2], ys[3], at.kernel[0], at.kernel[1],
                 at.stride[0], at.stride[1], at.pad[0], at.pad[1]};
  const int64_t planes = xs[0] * xs[1], in_plane = g.h * g.w, out_plane = g.oh * g.ow;
  const CpuIsa level = vector_level(cpu_isa());  // asked once: it reads the environment
  const int64_t out_size = grad ? in_plane : out_plane;
  if (is_half_float(out.dtype)) {
    // 16-bit tensors (the precision policy's max pools, jit/passes/half_convolutions.h): a
    // plane at a time widened (exactly) into this thread's floats, pooled, and rounded back.
    internal_check(op == Op::MaxPool2D || op == Op::MaxPool2DGrad) << "a 16-bit " << op_name(op);
    const DType t = out.dtype;
    parallel(pool, planes, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> x, dy, o;
      x.resize(in_plane), dy.resize(out_plane), o.resize(out_size);
      for (int64_t p = begin; p < end; ++p) {
        widen_span(in[0].h() + p * in_plane, x.data(), in_plane, t);
        if (grad) widen_span(in.back().h() + p * out_plane, dy.data(), out_plane, t);
        pool_plane(op, g, x.data(), dy.data(), o.data(), level);
        if (at.relu_mask) mask_not_positive(x.data(), o.data(), in_plane);
        narrow_span(o.data(), out.h() + p * out_size, out_size, t);
      }
    });
    return;
  }
  parallel(pool, planes, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const float* x = op == Op::AvgPool2DGrad ? nullptr : in[0].f() + p * in_plane;
      const float* dy = grad ? in.back().f() + p * out_plane : nullptr;
      pool_plane(op, g, x, dy, out.f() + p * out_size, level);
      if (at.relu_mask) mask_not_positive(x, out.f() + p * out_size, in_plane);
    }
  });
}

}  // namespace towerjit::cpujit
