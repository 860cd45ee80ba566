#include "runtime/cpu/narrow_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "runtime/cpu/conv.h"
#include "runtime/cpu/conv_images.h"
#include "runtime/cpu/vector_lanes.h"

namespace towerjit::cpujit {
namespace {

// One image's window rows: tap t = (ci, ky, kx) of output pixel p = oy * OW + ox is
// rows[off[t] + p], for p in [0, OH * OW). At stride 1 there is one row per (ci, kx), holding
// the padded image's rows r = 0..Hp-1 shifted by kx, OW floats each (row[r * OW + ox] =
// xpad[ci][r][ox + kx]); tap (ci, ky, kx) starts ky image rows into it: KW copies of the image
// rather than KH * KW. At other strides one row per tap (one image's im2col).
struct WindowRows {
  bool unit_stride;
  int64_t count, length;     // rows of `length` floats
  std::vector<int64_t> off;  // per tap (ci, ky, kx), the order of the filter's layout
};

WindowRows window_rows(const ConvGeometry& g) {
  WindowRows r;
  r.unit_stride = g.sh == 1 && g.sw == 1;
  r.count = r.unit_stride ? g.c * g.kw : g.ckk();
  r.length = r.unit_stride ? g.hp() * g.ow : g.spatial();
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t ky = 0; ky < g.kh; ++ky)
      for (int64_t kx = 0; kx < g.kw; ++kx)
        r.off.push_back(r.unit_stride ? (ci * g.kw + kx) * r.length + ky * g.ow
                                      : ((ci * g.kh + ky) * g.kw + kx) * r.length);
  return r;
}

// out[j] = in[j] for j < n, by vectors; the lanes of the last vector past n are stored as
// zeros (up to 7 floats past out + n: the caller leaves room) and never read from `in`.
TOWERJIT_TARGET_AVX2 void copy_run(const float* in, int64_t n, float* out) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(out + j, _mm256_loadu_ps(in + j));
  if (j < n) {
    const __m256i first = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - j)),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_storeu_ps(out + j, _mm256_maskload_ps(in + j, first));
  }
}

// The rows of one image [C, H, W]; zero where a window reaches into the padding. Rows are
// written in order, so a run's spill past its end lands on what is written next, or in the
// scratch's slack.
void fill_rows(const ConvGeometry& g, const WindowRows& r, const float* image, float* rows) {
  if (r.unit_stride) {
    for (int64_t ci = 0; ci < g.c; ++ci)
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        // Output columns [lo, hi) read the image's columns ox + kx - pw.
        const int64_t lo = std::clamp<int64_t>(g.pw - kx, 0, g.ow);
        const int64_t hi = std::clamp<int64_t>(g.w + g.pw - kx, lo, g.ow);
        float* out = rows + (ci * g.kw + kx) * r.length;
        for (int64_t row = 0; row < g.hp(); ++row, out += g.ow) {
          const int64_t iy = row - g.ph;
          if (iy < 0 || iy >= g.h) {
            for (int64_t j = 0; j < g.ow; ++j) out[j] = 0.0f;
            continue;
          }
          for (int64_t j = 0; j < lo; ++j) out[j] = 0.0f;
          copy_run(image + (ci * g.h + iy) * g.w + kx - g.pw + lo, hi - lo, out + lo);
          for (int64_t j = hi; j < g.ow; ++j) out[j] = 0.0f;
        }
      }
    return;
  }
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t ky = 0; ky < g.kh; ++ky)
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        float* out = rows + ((ci * g.kh + ky) * g.kw + kx) * r.length;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t iy = oy * g.sh + ky - g.ph;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t ix = ox * g.sw + kx - g.pw;
            *out++ = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ? image[(ci * g.h + iy) * g.w + ix] : 0.0f;
          }
        }
      }
}

// The register blocks; every loop over a block is unrolled and the accumulators are one flat
// array, which keeps them in registers (see direct_conv.cpp).
//
// forward<OB, PV>: output channels o0..o0+OB-1 at PV vectors of pixels from p: acc[ob][v] +=
// w[ob][t] (broadcast) * rows[off[t] + p + v * WIDTH] over the taps t; `w` is the filter at
// o0 ([O][taps]), `y` the image's output at (o0, 0) ([O][S]); blocks follow one another up to
// p_end, and lanes at or past S are not stored. Per tap: PV loads and OB broadcasts for OB * PV FMAs.
// With `bias` (output channel o0's at bias[0]) the epilogue (conv_epilogue.h) before each store:
// the channel's bias added, then with `relu` the DSL's relu.
//
// filter<OB, TB>: output channels x taps t0..t0+TB-1, summed over the image's S pixels, a
// vector of per-lane sums each (`part` at (o0, t0) of [O][taps][WIDTH], added to): dy's rows
// [O][S] at o0. Per vector of pixels: TB + OB loads for OB * TB FMAs. The last partial vector
// is loaded masked (zeros past S), so that nothing past the image enters a sum.
#define TOWERJIT_UNROLL _Pragma("GCC unroll 32")
#define TOWERJIT_NARROW_KERNELS(NS, TARGET, VEC, WIDTH, ACCS, ZERO, LOAD, STORE, BROADCAST, FMA, MASKLOAD,          \
                                MASKSTORE, ADD, RELU)                                                               \
  namespace NS {                                                                                                    \
  constexpr int64_t kWidth = WIDTH;                                                                                 \
  constexpr int kAccs = ACCS;                                                                                       \
  template <int OB, int PV>                                                                                         \
  TARGET void forward(int64_t taps, const float* rows, const int64_t* off, const float* w, int64_t p,              \
                      int64_t p_end, float* y, int64_t s, const float* bias, bool relu) {                           \
    for (; p < p_end; p += PV * WIDTH) {                                                                             \
      VEC acc[OB * PV];                                                                                              \
      TOWERJIT_UNROLL for (int a = 0; a < OB * PV; ++a) acc[a] = ZERO();                                             \
      for (int64_t t = 0; t < taps; ++t) {                                                                           \
        const float* xr = rows + off[t] + p;                                                                         \
        VEC xv[PV];                                                                                                  \
        TOWERJIT_UNROLL for (int v = 0; v < PV; ++v) xv[v] = LOAD(xr + v * WIDTH);                                   \
        TOWERJIT_UNROLL for (int ob = 0; ob < OB; ++ob) {                                                            \
          const VEC b = BROADCAST(w + ob * taps + t);                                                                \
          TOWERJIT_UNROLL for (int v = 0; v < PV; ++v) acc[ob * PV + v] = FMA(b, xv[v], acc[ob * PV + v]);           \
        }                                                                                                            \
      }                                                                                                              \
      if (bias)                                                                                                      \
        TOWERJIT_UNROLL for (int a = 0; a < OB * PV; ++a) {                                                          \
          acc[a] = ADD(acc[a], BROADCAST(bias + a / PV));                                                            \
          if (relu) acc[a] = RELU(acc[a]);                                                                           \
        }                                                                                                            \
      TOWERJIT_UNROLL for (int a = 0; a < OB * PV; ++a) {                                                            \
        const int64_t ob = a / PV, v = a % PV, left = s - p - v * WIDTH;                                             \
        float* out = y + ob * s + p + v * WIDTH;                                                                     \
        if (left >= WIDTH)                                                                                           \
          STORE(out, acc[a]);                                                                                        \
        else if (left > 0)                                                                                           \
          MASKSTORE(out, left, acc[a]);                                                                              \
      }                                                                                                              \
    }                                                                                                                \
  }                                                                                                                 \
  template <int OB, int TB>                                                                                         \
  TARGET void filter(const float* rows, const int64_t* off, const float* dy, int64_t s, int64_t p, int64_t p_end,    \
                     float* part, int64_t taps) {                                                                    \
    VEC acc[OB * TB];                                                                                               \
    TOWERJIT_UNROLL for (int a = 0; a < OB * TB; ++a) acc[a] = LOAD(part + ((a / TB) * taps + a % TB) * WIDTH);     \
    const float* xr[TB];                                                                                            \
    TOWERJIT_UNROLL for (int t = 0; t < TB; ++t) xr[t] = rows + off[t];                                             \
    for (; p + WIDTH <= p_end; p += WIDTH) {                                                                         \
      VEC xv[TB];                                                                                                   \
      TOWERJIT_UNROLL for (int t = 0; t < TB; ++t) xv[t] = LOAD(xr[t] + p);                                         \
      TOWERJIT_UNROLL for (int ob = 0; ob < OB; ++ob) {                                                             \
        const VEC d = LOAD(dy + ob * s + p);                                                                        \
        TOWERJIT_UNROLL for (int t = 0; t < TB; ++t) acc[ob * TB + t] = FMA(d, xv[t], acc[ob * TB + t]);            \
      }                                                                                                             \
    }                                                                                                               \
    if (p < p_end) {                                                                                                \
      const int64_t left = p_end - p;                                                                                \
      VEC xv[TB];                                                                                                   \
      TOWERJIT_UNROLL for (int t = 0; t < TB; ++t) xv[t] = MASKLOAD(xr[t] + p, left);                               \
      TOWERJIT_UNROLL for (int ob = 0; ob < OB; ++ob) {                                                             \
        const VEC d = MASKLOAD(dy + ob * s + p, left);                                                              \
        TOWERJIT_UNROLL for (int t = 0; t < TB; ++t) acc[ob * TB + t] = FMA(d, xv[t], acc[ob * TB + t]);            \
      }                                                                                                             \
    }                                                                                                               \
    TOWERJIT_UNROLL for (int a = 0; a < OB * TB; ++a) STORE(part + ((a / TB) * taps + a % TB) * WIDTH, acc[a]);     \
  }                                                                                                                 \
  }  // namespace NS

// 12 accumulators of the 16 AVX2 registers (a block's loads and broadcast take the rest), 24
// of AVX-512's 32.
TOWERJIT_NARROW_KERNELS(avx2, TOWERJIT_TARGET_AVX2, __m256, 8, 12, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_storeu_ps,
                        _mm256_broadcast_ss, _mm256_fmadd_ps, maskload8, maskstore8, _mm256_add_ps, relu8)
TOWERJIT_NARROW_KERNELS(avx512, TOWERJIT_TARGET_AVX512, __m512, 16, 24, _mm512_setzero_ps, _mm512_loadu_ps,
                        _mm512_storeu_ps, broadcast16, _mm512_fmadd_ps, maskload16, maskstore16, _mm512_add_ps,
                        relu16)

using ForwardBlock = void (*)(int64_t, const float*, const int64_t*, const float*, int64_t, int64_t, float*, int64_t,
                              const float*, bool);
using FilterBlock = void (*)(const float*, const int64_t*, const float*, int64_t, int64_t, int64_t, float*, int64_t);

// One instruction set's blocks: forward[ob][pv] for ob = 1..forward_channels output channels
// and pv = 1..accs / ob vectors of pixels; filter[ob][tb] for ob = 1..4 and tb = 1..accs / 4.
struct Kernels {
  int64_t width;
  int accs, forward_channels = 0, filter_channels = 4, filter_taps = 0;
  std::vector<std::vector<ForwardBlock>> forward;
  std::vector<std::vector<FilterBlock>> filter;
};

#define TOWERJIT_NARROW_TABLES(NS)                                                                                   \
  namespace NS {                                                                                                    \
  template <int OB, int... P>                                                                                       \
  std::vector<ForwardBlock> forward_row(std::integer_sequence<int, P...>) {                                         \
    return {nullptr, &forward<OB, P + 1>...};                                                                       \
  }                                                                                                                 \
  template <int... O>                                                                                               \
  std::vector<std::vector<ForwardBlock>> forward_table(std::integer_sequence<int, O...>) {                          \
    return {{}, forward_row<O + 1>(std::make_integer_sequence<int, kAccs / (O + 1)>())...};                         \
  }                                                                                                                 \
  template <int OB, int... T>                                                                                       \
  std::vector<FilterBlock> filter_row(std::integer_sequence<int, T...>) {                                           \
    return {nullptr, &filter<OB, T + 1>...};                                                                        \
  }                                                                                                                 \
  template <int... O>                                                                                               \
  std::vector<std::vector<FilterBlock>> filter_table(std::integer_sequence<int, O...>) {                            \
    return {{}, filter_row<O + 1>(std::make_integer_sequence<int, kAccs / 4>())...};                                \
  }                                                                                                                 \
  Kernels kernels() {                                                                                               \
    Kernels k{kWidth, kAccs};                                                                                       \
    k.forward_channels = kAccs / 3;                                                                                 \
    k.filter_taps = kAccs / 4;                                                                                      \
    k.forward = forward_table(std::make_integer_sequence<int, kAccs / 3>());                                        \
    k.filter = filter_table(std::make_integer_sequence<int, 4>());                                                  \
    return k;                                                                                                       \
  }                                                                                                                 \
  }  // namespace NS

TOWERJIT_NARROW_TABLES(avx2)
TOWERJIT_NARROW_TABLES(avx512)

const Kernels& kernels(bool avx512) {
  static const Kernels k2 = avx2::kernels(), k512 = avx512::kernels();
  return avx512 ? k512 : k2;
}

// n items cut into the fewest blocks of at most `most`, of sizes differing by at most one.
struct EvenBlocks {
  int64_t n, count;
  EvenBlocks(int64_t items, int64_t most) : n(items), count((items + most - 1) / most) {}
  int64_t cut(int64_t b) const { return n * b / count; }
};

// This thread's window rows, with room past the last for a block's reads beyond the image
// (kept finite: the forward block loads them and drops those lanes).
float* rows_scratch(const WindowRows& r, const Kernels& k) {
  const int64_t used = r.count * r.length, slack = k.accs * k.width;
  float* rows = conv_scratch(0, used + slack);
  std::fill(rows + used, rows + used + slack, 0.0f);
  return rows;
}

}  // namespace

void narrow_conv_forward(const ConvGeometry& g, bool avx512, const View& x, const float* w, const View& y,
                         const ConvEpilogue& epilogue, ThreadPool* pool) {
  const Kernels& k = kernels(avx512);
  const WindowRows r = window_rows(g);
  const int64_t taps = g.ckk(), s = g.spatial();
  // Blocks of up to accs / 3 output channels, each with as many vectors of pixels as the
  // accumulators allow (one output channel: 12 vectors at AVX2).
  const EvenBlocks channels(g.o, k.forward_channels);
  parallel(pool, g.n, [&](int64_t begin, int64_t end) {
    float* rows = rows_scratch(r, k);
    for (int64_t i = begin; i < end; ++i) {
      fill_rows(g, r, image_in(x, i, g.c * g.h * g.w, 2), rows);
      float* yi = epilogue.image_out(y, i);
      for (int64_t b = 0; b < channels.count; ++b) {
        const int64_t o0 = channels.cut(b), ob = channels.cut(b + 1) - o0, most = k.accs / ob;
        // Blocks of `most` vectors of pixels in one call, then one block of the rest.
        const int64_t vectors = (s + k.width - 1) / k.width, full = vectors / most * most;
        const float* bias = epilogue.bias_from(o0);
        if (full)
          k.forward[ob][most](taps, rows, r.off.data(), w + o0 * taps, 0, full * k.width, yi + o0 * s, s, bias,
                              epilogue.relu());
        if (full < vectors)
          k.forward[ob][vectors - full](taps, rows, r.off.data(), w + o0 * taps, full * k.width, s, yi + o0 * s, s,
                                        bias, epilogue.relu());
      }
      epilogue.image_done(y, i, yi);
    }
  });
}

void narrow_conv_grad_filter(const ConvGeometry& g, bool avx512, const View& x, const View& dy, float* dw,
                             ThreadPool* pool) {
  const Kernels& k = kernels(avx512);
  const WindowRows r = window_rows(g);
  const int64_t taps = g.ckk(), s = g.spatial(), size = g.o * taps * k.width;
  const EvenBlocks channels(g.o, k.filter_channels), tap_blocks(taps, k.filter_taps);
  // 16 chunks of the batch, whatever the thread count; each sums its images in order into
  // per-lane partial sums.
  const int64_t chunks = std::min<int64_t>(g.n, 16);
  std::vector<float> partial(chunks * size, 0.0f);
  parallel(pool, chunks, [&](int64_t first, int64_t last) {
    float* rows = rows_scratch(r, k);
    for (int64_t chunk = first; chunk < last; ++chunk)
      for (int64_t i = g.n * chunk / chunks; i < g.n * (chunk + 1) / chunks; ++i) {
        fill_rows(g, r, image_in(x, i, g.c * g.h * g.w, 2), rows);
        const float* dyi = image_in(dy, i, g.o * s, 3);
        // Each tile over all of the image's pixels (strips of pixels that stay in L1 across the
        // tiles were slower: each call then reloads and stores its partial sums more often).
        for (int64_t b = 0; b < channels.count; ++b) {
          const int64_t o0 = channels.cut(b), ob = channels.cut(b + 1) - o0;
          for (int64_t tb = 0; tb < tap_blocks.count; ++tb) {
            // A slice of the chunk's next image with each tile (conv_images.h). The cnn's 1->16
            // layer from memory on two threads: 0.48-0.51 ms without, 0.45-0.53 with a slice a
            // block of channels (4 an image), 0.38-0.42 with one a tile (12). In the forward a
            // prefetch measured nothing: its traffic is the output's writes.
            if (i + 1 < g.n * (chunk + 1) / chunks) {
              const int64_t slice = b * tap_blocks.count + tb, slices = channels.count * tap_blocks.count;
              prefetch_image(x, i + 1, g.c * g.h * g.w, slice, slices);
              prefetch_image(dy, i + 1, g.o * s, slice, slices);
            }
            const int64_t t0 = tap_blocks.cut(tb), nt = tap_blocks.cut(tb + 1) - t0;
            k.filter[ob][nt](rows, r.off.data() + t0, dyi + o0 * s, s, 0, s,
                             partial.data() + chunk * size + (o0 * taps + t0) * k.width, taps);
          }
        }
      }
  });
  // dw [O][C*KH*KW] is [O][taps]: each element's lanes summed over the chunks in order, then
  // the lanes in order (O * taps elements: a few hundred; on this thread).
  std::vector<float> lanes(k.width);
  for (int64_t e = 0; e < g.o * taps; ++e) {
    std::fill(lanes.begin(), lanes.end(), 0.0f);
    for (int64_t chunk = 0; chunk < chunks; ++chunk)
      for (int64_t l = 0; l < k.width; ++l) lanes[l] += partial[chunk * size + e * k.width + l];
    float sum = 0.0f;
    for (float v : lanes) sum += v;
    dw[e] = sum;
  }
}

}  // namespace towerjit::cpujit
