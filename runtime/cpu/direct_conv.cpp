#include "runtime/cpu/direct_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <utility>
#include <vector>

#include "jit/knobs.h"
#include "runtime/cpu/conv.h"
#include "runtime/cpu/conv_geometry.h"
#include "runtime/cpu/conv_images.h"
#include "runtime/cpu/half_spans.h"
#include "runtime/cpu/vector_lanes.h"
#include "runtime/cpu/narrow_conv.h"
#include "runtime/cpu/pool.h"
#include "runtime/cpu/transpose.h"

namespace towerjit::cpujit {
namespace {

// One convolution as the kernels see it: its sizes, with the output channels in blocks of
// `lanes` (two vectors: 16 with AVX2, 32 with AVX-512).
struct Conv : ConvGeometry {
  int64_t lanes = 16;  // a power of two, so the kernels' address arithmetic needs no division
                       // (a 64-bit idiv had run in every forward block's epilogue)
  int64_t opad() const { return (o + lanes - 1) & -lanes; }
  int64_t blocks() const { return opad() >> std::countr_zero(static_cast<uint64_t>(lanes)); }
};

// One image [C, H, W] into xp[Hp][C][Wp] (each padded row, channel after channel), zero in the
// padding: the forward kernels' layout, where a block's pixels along a row are consecutive
// floats. Only the padding is cleared; the rest is copied over row by row.
TOWERJIT_TARGET_AVX2 void pack_rows(const Conv& g, const float* image, float* xp) {
  const int64_t row = g.c * g.wp();
  std::fill(xp, xp + g.ph * row, 0.0f);
  std::fill(xp + (g.ph + g.h) * row, xp + g.hp() * row, 0.0f);
  for (int64_t iy = 0; iy < g.h; ++iy)
    for (int64_t ci = 0; ci < g.c; ++ci) {
      // [pw zeros][w floats][pw zeros], by vectors (a call to memmove per row of 14 or 28
      // floats cost more than the transposes it replaced).
      const float* in = image + (ci * g.h + iy) * g.w;
      float* out = xp + (iy + g.ph) * row + ci * g.wp();
      for (int64_t j = 0; j < g.pw; ++j) out[j] = 0.0f;
      out += g.pw;
      int64_t j = 0;
      for (; j + 8 <= g.w; j += 8) _mm256_storeu_ps(out + j, _mm256_loadu_ps(in + j));
      if (j < g.w) maskstore8(out + j, g.w - j, maskload8(in + j, g.w - j));
      for (j = g.w; j < g.w + g.pw; ++j) out[j] = 0.0f;
    }
}

// Image i of a routed pool gradient (conv_images.h) straight into pack_rows's layout: each
// channel's pooled rows routed into its rows of xp, and only the padding cleared, where
// routing the image into scratch and packing it from there had been two passes over it.
void pack_rows_routed(const Conv& g, const View& x, int64_t i, float* xp) {
  const int64_t row = g.c * g.wp();
  std::fill(xp, xp + g.ph * row, 0.0f);
  std::fill(xp + (g.ph + g.h) * row, xp + g.hp() * row, 0.0f);
  for (int64_t iy = 0; iy < g.h; ++iy)
    for (int64_t ci = 0; ci < g.c; ++ci) {
      float* out = xp + (iy + g.ph) * row + ci * g.wp();
      std::fill(out, out + g.pw, 0.0f);
      std::fill(out + g.pw + g.w, out + g.wp(), 0.0f);
    }
  const int64_t pooled_rows = g.h / 2;
  for (int64_t ci = 0; ci < g.c; ++ci)
    route_pool_rows(*x.routed, (i * g.c + ci) * pooled_rows, pooled_rows, g.w / 2,
                    xp + g.ph * row + ci * g.wp() + g.pw, row);
}

// One image [C, H, W] into xp[Hp][Wp][C] (channels last), zero in the padding: the filter
// gradient's layout, where a block's taps are consecutive channels. Only the padding is
// cleared: the rest is written over.
void pack_channels_last(const Conv& g, const float* image, float* xp) {
  const int64_t row = g.wp() * g.c, edge = g.pw * g.c;
  std::fill(xp, xp + g.ph * row, 0.0f);
  std::fill(xp + (g.ph + g.h) * row, xp + g.hp() * row, 0.0f);
  for (int64_t iy = 0; iy < g.h; ++iy) {  // row iy of every channel: [C][W] -> [W][C]
    float* out = xp + (iy + g.ph) * row;
    std::fill(out, out + edge, 0.0f);
    std::fill(out + row - edge, out + row, 0.0f);
    transpose_floats(image + iy * g.w, g.c, g.w, g.h * g.w, out + edge, g.c);
  }
}

// Weights [O, C, KH, KW] into wp[O/lanes][KH][KW][C][lanes] (the order the forward kernel walks
// them), zero past O. `flip` reads them rotated by 180 degrees with O and C swapped
// (w[c, o, KH-1-ky, KW-1-kx]): the input gradient's filter.
std::vector<float> pack_weights(const Conv& g, const float* w, bool flip) {
  std::vector<float> wp(g.blocks() * g.ckk() * g.lanes, 0.0f);
  for (int64_t o = 0; o < g.o; ++o)
    for (int64_t ci = 0; ci < g.c; ++ci)
      for (int64_t ky = 0; ky < g.kh; ++ky)
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const float v = flip ? w[((ci * g.o + o) * g.kh + (g.kh - 1 - ky)) * g.kw + (g.kw - 1 - kx)]
                               : w[((o * g.c + ci) * g.kh + ky) * g.kw + kx];
          wp[((((o / g.lanes) * g.kh + ky) * g.kw + kx) * g.c + ci) * g.lanes + o % g.lanes] = v;
        }
  return wp;
}

// The register-blocked kernels. A forward block is R output pixels along a row x one block of
// NV vectors of output channels: `x` is the image packed by pack_rows at the first pixel's
// window corner, `w` the block's weights as pack_weights lays them out, `out` the pixels'
// [R][opad] results. Pixel r's input for tap (ky, kx, ci) is x[ky * C * Wp + ci * Wp + kx +
// r * SW]: with the stride SW known to the compiler (1 or 2; 0 reads g.sw), every broadcast is
// one pointer plus a constant, so each FMA takes its operand from memory as one fused
// instruction (a register index per pixel had spilled pointers and split the FMAs in two). The
// channels are the inner loop: with kx inner, GCC carried the loads one kx shares with the
// next in registers and spilled them.
// A filter block is R taps x one block of output channels, summed over an image's pixels
// (pack_channels_last's layout): acc[t] += x[window + tap t] * dy[pixel], with `dy`
// [OH*OW][opad] at the block, added into `dw` [R][opad]. Tap t's element of a window is
// `offsets[t]`, or `t` itself (TAPS_IN_A_ROW: the block's taps are consecutive input channels of
// one (ky, kx), and `xp` points at the first).
// R * NV accumulators, NV weights and a broadcast must fit the registers: R <= 6 with AVX2
// (NV = 2: 15 of 16), R <= 12 (NV = 2) or 24 (NV = 1) with AVX-512.
//
// Every loop over R and NV is unrolled by pragma, the accumulators one flat array: only then
// does GCC keep them in registers throughout (with a nested array it stored all of them to the
// stack after every FMA at AVX2, which halved the kernels' rate).
#define TOWERJIT_UNROLL _Pragma("GCC unroll 32")
#define TOWERJIT_KERNELS(FORWARD, FILTER, TARGET, VEC, WIDTH, ZERO, LOAD, STORE, BROADCAST, FMA, ADD) \
  template <int R, int NV, int SW>                                                               \
  TARGET void FORWARD(const Conv& g, const float* x, const float* w, float* out) {              \
    const int64_t sw = SW ? SW : g.sw, plane = g.wp(), row = g.c * plane;                       \
    VEC acc[R * NV];                                                                             \
    TOWERJIT_UNROLL for (int a = 0; a < R * NV; ++a) acc[a] = ZERO();                            \
    for (int64_t ky = 0; ky < g.kh; ++ky)                                                        \
      for (int64_t kx = 0; kx < g.kw; ++kx) {                                                    \
        const float* xr = x + ky * row + kx;                                                     \
        for (int64_t ci = 0; ci < g.c; ++ci, xr += plane, w += NV * WIDTH) {                     \
          VEC wv[NV];                                                                            \
          TOWERJIT_UNROLL for (int v = 0; v < NV; ++v) wv[v] = LOAD(w + v * WIDTH);              \
          TOWERJIT_UNROLL for (int r = 0; r < R; ++r) {                                          \
            const VEC xb = BROADCAST(xr + r * sw);                                               \
            TOWERJIT_UNROLL for (int v = 0; v < NV; ++v) acc[r * NV + v] = FMA(xb, wv[v], acc[r * NV + v]); \
          }                                                                                      \
        }                                                                                        \
      }                                                                                          \
    const int64_t ld = g.opad();                                                                 \
    TOWERJIT_UNROLL for (int a = 0; a < R * NV; ++a) STORE(out + (a / NV) * ld + (a % NV) * WIDTH, acc[a]); \
  }                                                                                              \
  template <int R, int NV, bool TAPS_IN_A_ROW>                                                   \
  TARGET void FILTER(const Conv& g, const float* xp, const int64_t* offsets, const float* dy,   \
                     float* dw) {                                                                \
    int64_t off[R];                                                                              \
    TOWERJIT_UNROLL for (int t = 0; t < R; ++t) off[t] = TAPS_IN_A_ROW ? t : offsets[t];         \
    VEC acc[R * NV];                                                                             \
    TOWERJIT_UNROLL for (int a = 0; a < R * NV; ++a) acc[a] = ZERO();                            \
    const int64_t row = g.wp() * g.c, ld = g.opad(), step = g.sw * g.c;                          \
    for (int64_t oy = 0; oy < g.oh; ++oy) {                                                      \
      const float* corner = xp + oy * g.sh * row;                                                \
      const float* dr = dy + oy * g.ow * ld;                                                     \
      for (int64_t ox = 0; ox < g.ow; ++ox, corner += step, dr += ld) {                          \
        VEC d[NV];                                                                               \
        TOWERJIT_UNROLL for (int v = 0; v < NV; ++v) d[v] = LOAD(dr + v * WIDTH);                \
        TOWERJIT_UNROLL for (int t = 0; t < R; ++t) {                                            \
          const VEC xb = BROADCAST(corner + off[t]);                                             \
          TOWERJIT_UNROLL for (int v = 0; v < NV; ++v) acc[t * NV + v] = FMA(xb, d[v], acc[t * NV + v]); \
        }                                                                                        \
      }                                                                                          \
    }                                                                                            \
    TOWERJIT_UNROLL for (int a = 0; a < R * NV; ++a) {                                           \
      float* out = dw + (a / NV) * ld + (a % NV) * WIDTH;                                        \
      STORE(out, ADD(LOAD(out), acc[a]));                                                        \
    }                                                                                            \
  }


TOWERJIT_KERNELS(forward_avx2, filter_avx2, TOWERJIT_TARGET_AVX2, __m256, 8, _mm256_setzero_ps, _mm256_loadu_ps,
                 _mm256_storeu_ps, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_add_ps)
TOWERJIT_KERNELS(forward_avx512, filter_avx512, TOWERJIT_TARGET_AVX512, __m512, 16, _mm512_setzero_ps,
                 _mm512_loadu_ps, _mm512_storeu_ps, broadcast16, _mm512_fmadd_ps, _mm512_add_ps)

// The forward block at stride 1 with a window KW wide (3: every network the bench runs),
// for AVX-512. Pixel r's tap kx reads x[r + kx], so each float of an input row is broadcast
// once and used by every tap that reaches it: R + KW - 1 broadcasts and KW * NV weight vectors
// for R * KW * NV FMAs, where the kernel above loads a broadcast for every pixel and tap. A
// core that loads two vectors a cycle and does two FMAs (Zen 5) ran that kernel with one vector
// of channels (15 loads for 14 FMAs) at ~75% of its peak. The terms of an output are summed in
// the order (ky, ci, kx). R * NV accumulators, KW * NV weights and a broadcast: 31 of the 32
// registers at R = 12 and NV = 2, 28 at R = 24 and NV = 1.
template <int R, int NV, int KW>
TOWERJIT_TARGET_AVX512 void forward_slide_avx512(const Conv& g, const float* x, const float* w, float* out) {
  const int64_t plane = g.wp(), row = g.c * plane, tap = g.c * NV * 16;  // w: [ky][kx][ci][lanes]
  __m512 acc[R * NV];
  TOWERJIT_UNROLL for (int a = 0; a < R * NV; ++a) acc[a] = _mm512_setzero_ps();
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    const float* xr = x + ky * row;
    const float* wk = w + ky * KW * tap;
    for (int64_t ci = 0; ci < g.c; ++ci, xr += plane, wk += NV * 16) {
      __m512 wv[KW * NV];
      TOWERJIT_UNROLL for (int t = 0; t < KW * NV; ++t) wv[t] = _mm512_loadu_ps(wk + (t / NV) * tap + (t % NV) * 16);
      TOWERJIT_UNROLL for (int j = 0; j < R + KW - 1; ++j) {
        const __m512 xb = broadcast16(xr + j);
        TOWERJIT_UNROLL for (int kx = 0; kx < KW; ++kx) {
          const int r = j - kx;
          if (r < 0 || r >= R) continue;
          TOWERJIT_UNROLL for (int v = 0; v < NV; ++v) acc[r * NV + v] = _mm512_fmadd_ps(xb, wv[kx * NV + v], acc[r * NV + v]);
        }
      }
    }
  }
  const int64_t ld = g.opad();
  TOWERJIT_UNROLL for (int a = 0; a < R * NV; ++a) _mm512_storeu_ps(out + (a / NV) * ld + (a % NV) * 16, acc[a]);
}

using ForwardBlock = void (*)(const Conv&, const float*, const float*, float*);
using FilterBlock = void (*)(const Conv&, const float*, const int64_t*, const float*, float*);

// One instruction set's kernels for one block width: forward[s][r] for stride s (1, 2, or 0:
// any), slide3[r] (stride 1, windows 3 wide; AVX-512 only, else empty), filter[r] (taps
// anywhere in the window, by offsets) and filter_row[r] (consecutive taps) for blocks of
// r = 1..most items.
struct Kernels {
  int64_t lanes;
  int most;
  std::vector<ForwardBlock> forward[3];
  std::vector<FilterBlock> filter, filter_row;
  std::vector<ForwardBlock> slide3;
  const std::vector<ForwardBlock>& forward_at(const Conv& g) const {
    if (!slide3.empty() && g.sw == 1 && g.kw == 3) return slide3;
    return forward[g.sw <= 2 ? g.sw : 0];
  }
};

template <int NV, int... R>
Kernels avx2_kernels(std::integer_sequence<int, R...>) {
  return {NV * 8,
          sizeof...(R),
          {{nullptr, forward_avx2<R + 1, NV, 0>...},
           {nullptr, forward_avx2<R + 1, NV, 1>...},
           {nullptr, forward_avx2<R + 1, NV, 2>...}},
          {nullptr, filter_avx2<R + 1, NV, false>...},
          {nullptr, filter_avx2<R + 1, NV, true>...}};
}
template <int NV, int... R>
Kernels avx512_kernels(std::integer_sequence<int, R...>) {
  return {NV * 16,
          sizeof...(R),
          {{nullptr, forward_avx512<R + 1, NV, 0>...},
           {nullptr, forward_avx512<R + 1, NV, 1>...},
           {nullptr, forward_avx512<R + 1, NV, 2>...}},
          {nullptr, filter_avx512<R + 1, NV, false>...},
          {nullptr, filter_avx512<R + 1, NV, true>...},
          {nullptr, forward_slide_avx512<R + 1, NV, 3>...}};
}

// The filter gradient with vectors along the input channels, where they come in sixteens
// (AVX-512): OB output channels x TV taps (consecutive (ky, kx) of the window) of accumulators,
// each a vector of 16 channels, summed over an image's pixels: acc[ob][tv] += dy[pixel][o0 + ob]
// (broadcast) * x[pixel's window + tap tv][c0..c0 + 15]. Per pixel TV loads and OB broadcasts
// for OB * TV FMAs (8 x 3: 11 for 24), where the channels-last kernel above does one broadcast
// per FMA when the output channels fill one vector (16 of them). `xp` is the channels-last image
// at channel c0, `offsets` the TV taps' elements of a window, `dyt` [OH*OW][opad] at o0, and
// `part` [O][KH*KW][C] at (o0, first tap, c0), added to.
template <int OB, int TV>
TOWERJIT_TARGET_AVX512 void filter_by_channels(const Conv& g, const float* xp, const int64_t* offsets,
                                               const float* dyt, float* part) {
  int64_t off[TV];
  TOWERJIT_UNROLL for (int t = 0; t < TV; ++t) off[t] = offsets[t];
  __m512 acc[OB * TV];
  TOWERJIT_UNROLL for (int a = 0; a < OB * TV; ++a) acc[a] = _mm512_setzero_ps();
  const int64_t row = g.wp() * g.c, ld = g.opad(), step = g.sw * g.c;
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    const float* corner = xp + oy * g.sh * row;
    const float* dr = dyt + oy * g.ow * ld;
    for (int64_t ox = 0; ox < g.ow; ++ox, corner += step, dr += ld) {
      __m512 xv[TV];
      TOWERJIT_UNROLL for (int t = 0; t < TV; ++t) xv[t] = _mm512_loadu_ps(corner + off[t]);
      TOWERJIT_UNROLL for (int ob = 0; ob < OB; ++ob) {
        const __m512 d = _mm512_set1_ps(dr[ob]);
        TOWERJIT_UNROLL for (int t = 0; t < TV; ++t) acc[ob * TV + t] = _mm512_fmadd_ps(d, xv[t], acc[ob * TV + t]);
      }
    }
  }
  const int64_t kk = g.kh * g.kw;
  TOWERJIT_UNROLL for (int a = 0; a < OB * TV; ++a) {
    float* out = part + ((a / TV) * kk + a % TV) * g.c;
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), acc[a]));
  }
}

using ChannelFilterBlock = void (*)(const Conv&, const float*, const int64_t*, const float*, float*);
constexpr int kChannelBlockOutputs = 8, kChannelBlockTaps = 3;

// filter_by_channels<ob, tv> at [ob][tv], ob = 1..8, tv = 1..3.
template <int OB, int... T>
std::vector<ChannelFilterBlock> channel_filter_row(std::integer_sequence<int, T...>) {
  return {nullptr, &filter_by_channels<OB, T + 1>...};
}
template <int... O>
std::vector<std::vector<ChannelFilterBlock>> channel_filter_table(std::integer_sequence<int, O...>) {
  return {{}, channel_filter_row<O + 1>(std::make_integer_sequence<int, kChannelBlockTaps>())...};
}
const std::vector<std::vector<ChannelFilterBlock>>& channel_filter_blocks() {
  static const auto table = channel_filter_table(std::make_integer_sequence<int, kChannelBlockOutputs>());
  return table;
}

// The kernels for a convolution with `o` output channels, or null for the im2col path: the
// AVX-512 ones where the CPU has them (blocks of 32 channels, or 16 for 16 or fewer, so that
// no half block idles), else AVX2 + FMA (blocks of 16), as cpu_isa() allows;
// TOWERJIT_DIRECT_CONV=off turns them off.
const Kernels* kernels_for(int64_t o) {
  static const Kernels k2 = avx2_kernels<2>(std::make_integer_sequence<int, 6>());
  static const Kernels k512 = avx512_kernels<2>(std::make_integer_sequence<int, 12>());
  static const Kernels k512_narrow = avx512_kernels<1>(std::make_integer_sequence<int, 24>());
  if (!knobs::direct_conv()) return nullptr;
  switch (vector_level(cpu_isa())) {
    case CpuIsa::amx:
    case CpuIsa::avx512bf16:
    case CpuIsa::avx512: return o > 16 ? &k512 : &k512_narrow;
    case CpuIsa::avx2: return &k2;
    case CpuIsa::baseline: return nullptr;
  }
  return nullptr;
}

// Whether the AVX-512 kernels run (kernels_for chose them).
bool uses_avx512() { return vector_level(cpu_isa()) == CpuIsa::avx512; }

// n items cut into the fewest blocks of at most `most`, of sizes differing by at most one (a
// row of 14 pixels: 5 + 5 + 4 rather than 6 + 6 + 2, whose small block runs the kernel badly):
// block b is [cut(b), cut(b + 1)) of count() blocks.
struct EvenBlocks {
  int64_t n, count;
  EvenBlocks(int64_t items, int64_t most) : n(items), count((items + most - 1) / most) {}
  int64_t cut(int64_t b) const { return n * b / count; }
};

// One image: xp packed, its results into `out`, [OH*OW][opad] scratch. Each output row also
// prefetches a slice of the next image (`next(slice, slices)`).
template <typename Next>
void forward_image(const Conv& g, const Kernels& k, const float* xp, const float* wp, float* out, const Next& next) {
  const int64_t row = g.c * g.wp(), filter = g.ckk() * g.lanes;
  const std::vector<ForwardBlock>& blocks = k.forward_at(g);
  const EvenBlocks row_parts(g.ow, k.most);
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    next(oy, g.oh);
    for (int64_t part = 0; part < row_parts.count; ++part) {
      const int64_t ox = row_parts.cut(part), r = row_parts.cut(part + 1) - ox;
      const float* corner = xp + oy * g.sh * row + ox * g.sw;
      for (int64_t b = 0; b < g.blocks(); ++b)
        blocks[r](g, corner, wp + b * filter, out + (oy * g.ow + ox) * g.opad() + b * g.lanes);
    }
  }
}

// x and y of any float dtype, an image at a time in f32 (conv_images.h).
void forward(const Conv& g, const Kernels& k, const View& x, const std::vector<float>& wp, const View& y,
             const ConvEpilogue& epilogue, ThreadPool* pool) {
  const int64_t image = g.c * g.h * g.w;
  parallel(pool, g.n, [&](int64_t begin, int64_t end) {
    float* xp = conv_scratch(0, g.hp() * g.wp() * g.c);
    float* out = conv_scratch(1, g.spatial() * g.opad());
    for (int64_t i = begin; i < end; ++i) {
      if (x.routed)
        pack_rows_routed(g, x, i, xp);
      else
        pack_rows(g, image_in(x, i, image, 2), xp);
      forward_image(g, k, xp, wp.data(), out, [&](int64_t slice, int64_t slices) {
        if (i + 1 == end) return;
        prefetch_image(x, i + 1, image, slice, slices);
        epilogue.prefetch(y, i + 1, slice, slices);
      });
      if (epilogue.pools()) {  // pooled before the transpose: a quarter of it transposed
        epilogue.pool_pixels(out, g.oh, g.ow, g.o, g.opad(), i);
        continue;
      }
      // y_image [O, OH*OW], the epilogue applied as it is transposed there.
      float* yi = epilogue.image_out(y, i);
      transpose_floats(out, g.spatial(), g.o, g.opad(), yi, g.spatial(), epilogue.bias_from(0), epilogue.relu());
      epilogue.image_done(y, i, yi);
    }
  });
}

}  // namespace

bool direct_conv2d(const Attrs& at, const View& x, const View& w, const View& y, ThreadPool* pool,
                   const ConvEpilogue& epilogue) {
  const ConvGeometry geometry = conv_geometry(at, x.shape, w.shape, y.shape);
  const Kernels* k = kernels_for(geometry.o);
  if (!k) return false;
  std::vector<float> widened;
  const float* wf = as_floats(w, widened);
  if (geometry.c <= kNarrowChannels) {
    narrow_conv_forward(geometry, uses_avx512(), x, wf, y, epilogue, pool);
    return true;
  }
  const Conv g{geometry, k->lanes};
  forward(g, *k, x, pack_weights(g, wf, false), y, epilogue, pool);
  return true;
}

// At stride 1 the input gradient is a convolution of dy, padded by (k - 1 - p), with the
// filter rotated by 180 degrees and its channel axes swapped.
bool direct_conv2d_grad_input(const Attrs& at, const View& dy, const View& w, const View& dx, ThreadPool* pool) {
  const ConvGeometry f = conv_geometry(at, dx.shape, w.shape, dy.shape);
  const Kernels* k = kernels_for(f.c);
  if (!k || f.sh != 1 || f.sw != 1 || f.ph > f.kh - 1 || f.pw > f.kw - 1) return false;
  const Conv g{{f.n, f.o, f.oh, f.ow, f.c, f.kh, f.kw, f.h, f.w, 1, 1, f.kh - 1 - f.ph, f.kw - 1 - f.pw}, k->lanes};
  if (g.hp() - g.kh + 1 != g.oh || g.wp() - g.kw + 1 != g.ow) return false;
  std::vector<float> widened;
  const float* wf = as_floats(w, widened);
  if (g.o <= kNarrowChannels) {  // few input channels: the filter rotated, as [C][O][KH][KW]
    std::vector<float> flipped(f.o * f.ckk());
    for (int64_t ci = 0; ci < f.c; ++ci)
      for (int64_t o = 0; o < f.o; ++o)
        for (int64_t ky = 0; ky < f.kh; ++ky)
          for (int64_t kx = 0; kx < f.kw; ++kx)
            flipped[((ci * f.o + o) * f.kh + ky) * f.kw + kx] =
                wf[((o * f.c + ci) * f.kh + (f.kh - 1 - ky)) * f.kw + (f.kw - 1 - kx)];
    narrow_conv_forward(g, uses_avx512(), dy, flipped.data(), dx, {}, pool);
    return true;
  }
  forward(g, *k, dy, pack_weights(g, wf, true), dx, {}, pool);
  return true;
}

// The filter gradient sums each image's contribution into the partial sum of its chunk of the
// batch: a fixed number of chunks, whatever the thread count, each a run of consecutive images
// added in order. Threads take whole chunks, so an image is packed (channels-last, its dy
// transposed) into the thread's own cache and used at once by every tile (a block of taps x a
// block of output channels) of the filter; the chunks' partial sums are then added in chunk
// order, each thread adding those of a share of dw's elements. The bits do not depend on the
// number of threads.
bool direct_conv2d_grad_filter(const Attrs& at, const View& x, const View& dy, const View& dw, ThreadPool* pool) {
  const ConvGeometry geometry = conv_geometry(at, x.shape, dw.shape, dy.shape);
  const Kernels* k = kernels_for(geometry.o);
  if (!k) return false;
  // A 16-bit dw (a few thousand elements) is summed in f32, then rounded once.
  std::vector<float> wide;
  if (dw.dtype != DType::f32) wide.resize(static_cast<size_t>(dw.shape.elements(0)));
  float* dwf = dw.dtype == DType::f32 ? dw.f() : wide.data();
  auto round_dw = [&] {
    if (dw.dtype != DType::f32) narrow_span(wide.data(), dw.h(), static_cast<int64_t>(wide.size()), dw.dtype);
  };
  if (geometry.c <= kNarrowChannels) {
    narrow_conv_grad_filter(geometry, uses_avx512(), x, dy, dwf, pool);
    round_dw();
    return true;
  }
  const Conv g{geometry, k->lanes};
  const int64_t taps = g.ckk(), s = g.spatial(), kk = g.kh * g.kw;
  // Vectors along the input channels where they come in sixteens (AVX-512), else along the
  // output channels; each chunk's partial sum is laid out as its kernel writes it.
  const bool by_channels = uses_avx512() && g.c % 16 == 0;
  const int64_t size = by_channels ? g.o * kk * g.c : taps * g.opad();
  std::vector<int64_t> offsets;  // tap (ky, kx, ci) -> its element in a window of the packed image
  for (int64_t ky = 0; ky < g.kh; ++ky)
    for (int64_t kx = 0; kx < g.kw; ++kx)
      for (int64_t ci = 0; ci < g.c; ++ci) offsets.push_back((ky * g.wp() + kx) * g.c + ci);
  // Tiles of consecutive channels of one (ky, kx) where there are enough channels (the kernel
  // then finds its taps at fixed distances), else of any taps. By channels: tiles of up to 8
  // output channels x 3 window positions x 16 channels.
  struct Tile { int64_t tap, count, block; };
  std::vector<Tile> tiles;
  const bool by_row = g.c >= std::min<int64_t>(k->most, 8);
  const EvenBlocks outputs(g.o, kChannelBlockOutputs);  // the by-channels tiles' output blocks
  if (by_channels) {
    const EvenBlocks groups(kk, kChannelBlockTaps);
    for (int64_t b = 0; b < outputs.count; ++b)
      for (int64_t p = 0; p < groups.count; ++p)
        for (int64_t c0 = 0; c0 < g.c; c0 += 16)
          tiles.push_back({groups.cut(p) * g.c + c0, groups.cut(p + 1) - groups.cut(p), b});
  } else {
    const int64_t run = by_row ? g.c : taps, runs = taps / run;
    const EvenBlocks parts(run, k->most);
    for (int64_t r = 0; r < runs; ++r)
      for (int64_t part = 0; part < parts.count; ++part)
        for (int64_t b = 0; b < g.blocks(); ++b)
          tiles.push_back({r * run + parts.cut(part), parts.cut(part + 1) - parts.cut(part), b});
  }
  // Each window position's (ky, kx) element of a window, for the by-channels tiles.
  std::vector<int64_t> positions;
  for (int64_t t = 0; t < kk; ++t) positions.push_back(offsets[t * g.c]);
  // 16 chunks: enough to share out over a pool of a few threads evenly.
  const int64_t chunks = std::min<int64_t>(g.n, 16);
  std::vector<float> partial(chunks * size);  // zeroed by the thread that sums the chunk
  std::atomic<int64_t> finished{0};
  parallel(pool, chunks, [&](int64_t first, int64_t last) {
    float* xp = conv_scratch(0, g.hp() * g.wp() * g.c);
    float* dyt = conv_scratch(1, s * g.opad());
    if (g.o != g.opad()) std::fill(dyt, dyt + s * g.opad(), 0.0f);
    std::fill(partial.data() + first * size, partial.data() + last * size, 0.0f);
    const int64_t image = g.c * g.h * g.w, end = g.n * last / chunks;
    for (int64_t chunk = first; chunk < last; ++chunk)
      for (int64_t i = g.n * chunk / chunks; i < g.n * (chunk + 1) / chunks; ++i) {
        pack_channels_last(g, image_in(x, i, image, 2), xp);
        if (dy.routed)
          route_pool_image_channels_last(*dy.routed, i, g.o, g.oh, g.ow, dyt, g.opad(),
                                         conv_scratch(3, (2 * g.opad() + g.o) * (s / 4)));
        else
          transpose_floats(image_in(dy, i, g.o * s, 3), g.o, s, s, dyt, g.opad());
        for (size_t t = 0; t < tiles.size(); ++t) {
          const Tile& tile = tiles[t];
          if (i + 1 < end) {  // a slice of the next image with each tile (conv_images.h)
            prefetch_image(x, i + 1, image, t, tiles.size());
            prefetch_image(dy, i + 1, g.o * s, t, tiles.size());
          }
          if (by_channels) {  // tile.tap = position * C + c0
            const int64_t o0 = outputs.cut(tile.block), position = tile.tap / g.c, c0 = tile.tap % g.c;
            channel_filter_blocks()[outputs.cut(tile.block + 1) - o0][tile.count](
                g, xp + c0, positions.data() + position, dyt + o0,
                partial.data() + chunk * size + (o0 * kk + position) * g.c + c0);
            continue;
          }
          float* out = partial.data() + chunk * size + tile.tap * g.opad() + tile.block * g.lanes;
          if (by_row)
            k->filter_row[tile.count](g, xp + offsets[tile.tap], nullptr, dyt + tile.block * g.lanes, out);
          else
            k->filter[tile.count](g, xp, offsets.data() + tile.tap, dyt + tile.block * g.lanes, out);
        }
      }
    // Every thread runs one range of chunks at once (ThreadPool::parallel_for), so it can wait
    // here for the others and then add its share of dw's elements, the chunks in order: no
    // second round of waking the pool (milliseconds on a loaded machine). It sleeps while it
    // waits (a futex; yielding in a loop left it queued behind other programs' threads).
    int64_t done = finished.fetch_add(last - first, std::memory_order_acq_rel) + (last - first);
    if (done == chunks) finished.notify_all();
    while (done < chunks) {
      finished.wait(done, std::memory_order_acquire);
      done = finished.load(std::memory_order_acquire);
    }
    // dw[o][ci][ky][kx] = the chunks' sum of partial[tap = (ky, kx, ci)][o] (by channels:
    // partial[o][ky, kx][ci]), over a share of the partial sums' elements, each chunk's read in
    // one sweep.
    const int64_t e0 = size * first / chunks, e1 = size * last / chunks;
    std::vector<float> sum(partial.begin() + e0, partial.begin() + e1);
    for (int64_t chunk = 1; chunk < chunks; ++chunk) {
      const float* from = partial.data() + chunk * size;
      for (int64_t e = e0; e < e1; ++e) sum[e - e0] += from[e];
    }
    for (int64_t e = e0; e < e1; ++e) {
      if (by_channels) {
        const int64_t o = e / (kk * g.c), position = e / g.c % kk, ci = e % g.c;
        dwf[(o * g.c + ci) * kk + position] = sum[e - e0];
        continue;
      }
      const int64_t o = e % g.opad(), tap = e / g.opad();
      if (o >= g.o) continue;
      const int64_t ci = tap % g.c, kx = tap / g.c % g.kw, ky = tap / g.c / g.kw;
      dwf[((o * g.c + ci) * g.kh + ky) * g.kw + kx] = sum[e - e0];
    }
  });
  round_dw();
  return true;
}

}  // namespace towerjit::cpujit
