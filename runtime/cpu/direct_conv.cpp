#include "runtime/cpu/direct_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "jit/knobs.h"
#include "runtime/cpu/conv.h"

// The kernels are compiled for AVX2 + FMA whatever the build's target, and only called after
// the CPU has said it has both.
#define TOWERJIT_AVX2 __attribute__((target("avx2,fma")))

namespace towerjit::cpujit {
namespace {

constexpr int64_t kLanes = 16;  // output channels per block: two 8-float vectors
// Pixels (forward) or taps (filter gradient) per block: 6 x 2 accumulators, 2 vectors of
// weights or gradients and 1 broadcast fill 15 of the 16 vector registers.
constexpr int kBlock = 6;

// One convolution as the forward kernel sees it: `c` input channels of h x w, `o` output
// channels of oh x ow, a kh x kw window at stride (sh, sw) over the input padded by (ph, pw).
struct Conv {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  int64_t sh, sw, ph, pw;
  int64_t hp() const { return h + 2 * ph; }
  int64_t wp() const { return w + 2 * pw; }
  int64_t blocks() const { return (o + kLanes - 1) / kLanes; }
  int64_t opad() const { return blocks() * kLanes; }
  int64_t spatial() const { return oh * ow; }
  int64_t taps() const { return kh * kw * c; }
};

Conv conv_of(const Attrs& at, const Shape& x, const Shape& w, const Shape& y) {
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3],
          at.stride[0], at.stride[1], at.pad[0], at.pad[1]};
}

bool cpu_has_avx2_fma() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
}

bool enabled() { return cpu_has_avx2_fma() && knobs::direct_conv_enabled(); }

// Per-thread scratch, kept across calls: a training step convolves many times.
float* scratch(int slot, int64_t floats) {
  thread_local std::vector<float> buffers[2];
  if (static_cast<int64_t>(buffers[slot].size()) < floats) buffers[slot].resize(floats);
  return buffers[slot].data();
}

// out[j * ld_out + i] = in[i * ld_in + j] for i < rows, j < cols: 8x8 tiles through registers
// (the layout changes between NCHW and the kernels' channels-last blocks), scalar at the edges.
TOWERJIT_AVX2 void transpose(const float* in, int64_t rows, int64_t cols, int64_t ld_in, float* out,
                             int64_t ld_out) {
  int64_t i = 0;
  for (; i + 8 <= rows; i += 8) {
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      __m256 r[8], t[8];
      for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(in + (i + k) * ld_in + j);
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
      // r[k] holds column k (low 128-bit lane: rows 0-3) and column k + 4 (high lane) of rows
      // 0-3; r[k + 4] the same of rows 4-7.
      for (int k = 0; k < 4; ++k) {
        _mm256_storeu_ps(out + (j + k) * ld_out + i, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
        _mm256_storeu_ps(out + (j + k + 4) * ld_out + i, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
      }
    }
    for (; j < cols; ++j)
      for (int k = 0; k < 8; ++k) out[j * ld_out + i + k] = in[(i + k) * ld_in + j];
  }
  for (; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * ld_out + i] = in[i * ld_in + j];
}

// One image [C, H, W] into xp[Hp][Wp][C] (channels last), zero in the padding.
void pack_image(const Conv& g, const float* image, float* xp) {
  const int64_t wp = g.wp();
  std::fill(xp, xp + g.hp() * wp * g.c, 0.0f);
  for (int64_t iy = 0; iy < g.h; ++iy)  // row iy of every channel: [C][W] -> [W][C]
    transpose(image + iy * g.w, g.c, g.w, g.h * g.w, xp + ((iy + g.ph) * wp + g.pw) * g.c, g.c);
}

// Weights [O, C, KH, KW] into wp[O/16][KH][KW][C][16], zero past O. `flip` reads them rotated
// by 180 degrees with O and C swapped (w[c, o, KH-1-ky, KW-1-kx]): the input gradient's filter.
std::vector<float> pack_weights(const Conv& g, const float* w, bool flip) {
  std::vector<float> wp(g.blocks() * g.taps() * kLanes, 0.0f);
  for (int64_t o = 0; o < g.o; ++o)
    for (int64_t ci = 0; ci < g.c; ++ci)
      for (int64_t ky = 0; ky < g.kh; ++ky)
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const float v = flip ? w[((ci * g.o + o) * g.kh + (g.kh - 1 - ky)) * g.kw + (g.kw - 1 - kx)]
                               : w[((o * g.c + ci) * g.kh + ky) * g.kw + kx];
          wp[(((o / kLanes) * g.kh + ky) * g.kw + kx) * g.c * kLanes + ci * kLanes + o % kLanes] = v;
        }
  return wp;
}

// R output pixels (along a row) x 16 output channels. `x` is the padded image at the first
// pixel's window corner; the window's row ky is kw*c contiguous floats of x and of `w`.
template <int R>
TOWERJIT_AVX2 void forward_block(const Conv& g, const float* x, const float* w, float* out) {
  const int64_t row = g.wp() * g.c, pixel = g.sw * g.c, span = g.kw * g.c;
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    const float* xr = x + ky * row;
    const float* wr = w + ky * span * kLanes;
    for (int64_t j = 0; j < span; ++j) {
      const __m256 w0 = _mm256_loadu_ps(wr + j * kLanes), w1 = _mm256_loadu_ps(wr + j * kLanes + 8);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 xb = _mm256_broadcast_ss(xr + r * pixel + j);
        acc[r][0] = _mm256_fmadd_ps(xb, w0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(xb, w1, acc[r][1]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(out + r * g.opad(), acc[r][0]);
    _mm256_storeu_ps(out + r * g.opad() + 8, acc[r][1]);
  }
}

using ForwardBlock = void (*)(const Conv&, const float*, const float*, float*);
constexpr ForwardBlock kForward[kBlock + 1] = {nullptr, forward_block<1>, forward_block<2>, forward_block<3>,
                                                forward_block<4>, forward_block<5>, forward_block<6>};

// One image: xp packed, y_image [O, OH*OW]. `out` is [OH*OW][opad] scratch.
void forward_image(const Conv& g, const float* xp, const float* wp, float* out, float* y_image) {
  const int64_t wp_row = g.wp() * g.c, filter = g.taps() * kLanes;
  for (int64_t oy = 0; oy < g.oh; ++oy)
    for (int64_t ox = 0; ox < g.ow; ox += kBlock) {
      const int r = static_cast<int>(std::min<int64_t>(kBlock, g.ow - ox));
      const float* corner = xp + oy * g.sh * wp_row + ox * g.sw * g.c;
      for (int64_t b = 0; b < g.blocks(); ++b)
        kForward[r](g, corner, wp + b * filter, out + (oy * g.ow + ox) * g.opad() + b * kLanes);
    }
  transpose(out, g.spatial(), g.o, g.opad(), y_image, g.spatial());
}

void forward(const Conv& g, const float* x, const std::vector<float>& wp, float* y, ThreadPool* pool) {
  parallel(pool, g.n, [&](int64_t begin, int64_t end) {
    float* xp = scratch(0, g.hp() * g.wp() * g.c);
    float* out = scratch(1, g.spatial() * g.opad());
    for (int64_t i = begin; i < end; ++i) {
      pack_image(g, x + i * g.c * g.h * g.w, xp);
      forward_image(g, xp, wp.data(), out, y + i * g.o * g.spatial());
    }
  });
}

// T taps x 16 output channels of the filter gradient, summed over an image's output pixels:
// acc[t] += x[pixel's window + offset[t]] * dy[pixel]. `dy` is [OH*OW][opad] at the block.
template <int T>
TOWERJIT_AVX2 void filter_block(const Conv& g, const float* xp, const int64_t* offsets, const float* dy,
                                float* dw) {
  int64_t off[T];
  for (int t = 0; t < T; ++t) off[t] = offsets[t];
  __m256 acc[T][2];
  for (int t = 0; t < T; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  const int64_t row = g.wp() * g.c;
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    const float* xr = xp + oy * g.sh * row;
    const float* dr = dy + oy * g.ow * g.opad();
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const float* corner = xr + ox * g.sw * g.c;
      const __m256 d0 = _mm256_loadu_ps(dr + ox * g.opad()), d1 = _mm256_loadu_ps(dr + ox * g.opad() + 8);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m256 xb = _mm256_broadcast_ss(corner + off[t]);
        acc[t][0] = _mm256_fmadd_ps(xb, d0, acc[t][0]);
        acc[t][1] = _mm256_fmadd_ps(xb, d1, acc[t][1]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    float* d = dw + t * g.opad();
    _mm256_storeu_ps(d, _mm256_add_ps(_mm256_loadu_ps(d), acc[t][0]));
    _mm256_storeu_ps(d + 8, _mm256_add_ps(_mm256_loadu_ps(d + 8), acc[t][1]));
  }
}

using FilterBlock = void (*)(const Conv&, const float*, const int64_t*, const float*, float*);
constexpr FilterBlock kFilter[kBlock + 1] = {nullptr, filter_block<1>, filter_block<2>, filter_block<3>,
                                             filter_block<4>, filter_block<5>, filter_block<6>};

}  // namespace

bool direct_conv2d(const Attrs& at, const View& x, const View& w, const View& y, ThreadPool* pool) {
  if (!enabled()) return false;
  const Conv g = conv_of(at, x.shape, w.shape, y.shape);
  forward(g, x.f(), pack_weights(g, w.f(), false), y.f(), pool);
  return true;
}

// At stride 1 the input gradient is a convolution of dy, padded by (k - 1 - p), with the
// filter rotated by 180 degrees and its channel axes swapped.
bool direct_conv2d_grad_input(const Attrs& at, const View& dy, const View& w, const View& dx, ThreadPool* pool) {
  if (!enabled()) return false;
  const Conv f = conv_of(at, dx.shape, w.shape, dy.shape);
  if (f.sh != 1 || f.sw != 1 || f.ph > f.kh - 1 || f.pw > f.kw - 1) return false;
  const Conv g{f.n, f.o, f.oh, f.ow, f.c, f.kh, f.kw, f.h, f.w, 1, 1, f.kh - 1 - f.ph, f.kw - 1 - f.pw};
  if (g.hp() - g.kh + 1 != g.oh || g.wp() - g.kw + 1 != g.ow) return false;
  forward(g, dy.f(), pack_weights(g, w.f(), true), dx.f(), pool);
  return true;
}

bool direct_conv2d_grad_filter(const Attrs& at, const View& x, const View& dy, const View& dw, ThreadPool* pool) {
  if (!enabled()) return false;
  const Conv g = conv_of(at, x.shape, dw.shape, dy.shape);
  const int64_t taps = g.taps(), s = g.spatial();
  std::vector<int64_t> offsets;  // tap (ky, kx, ci) -> its element in a window of the packed image
  for (int64_t ky = 0; ky < g.kh; ++ky)
    for (int64_t kx = 0; kx < g.kw; ++kx)
      for (int64_t ci = 0; ci < g.c; ++ci) offsets.push_back((ky * g.wp() + kx) * g.c + ci);
  // One partial sum per chunk of images, added in chunk order: the same bits on every run.
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(g.n, pool ? pool->size() : 1));
  std::vector<std::vector<float>> partial(chunks, std::vector<float>(taps * g.opad(), 0.0f));
  parallel(pool, chunks, [&](int64_t first, int64_t last) {
    float* xp = scratch(0, g.hp() * g.wp() * g.c);
    float* dyt = scratch(1, s * g.opad());
    for (int64_t chunk = first; chunk < last; ++chunk)
      for (int64_t i = chunk * g.n / chunks; i < (chunk + 1) * g.n / chunks; ++i) {
        pack_image(g, x.f() + i * g.c * g.h * g.w, xp);
        const float* dyi = dy.f() + i * g.o * s;
        if (g.o != g.opad()) std::fill(dyt, dyt + s * g.opad(), 0.0f);
        transpose(dyi, g.o, s, s, dyt, g.opad());
        for (int64_t t = 0; t < taps; t += kBlock) {
          const int count = static_cast<int>(std::min<int64_t>(kBlock, taps - t));
          for (int64_t b = 0; b < g.blocks(); ++b)
            kFilter[count](g, xp, offsets.data() + t, dyt + b * kLanes,
                           partial[chunk].data() + t * g.opad() + b * kLanes);
        }
      }
  });
  for (int64_t chunk = 1; chunk < chunks; ++chunk)
    for (size_t k = 0; k < partial[0].size(); ++k) partial[0][k] += partial[chunk][k];
  for (int64_t o = 0; o < g.o; ++o)
    for (int64_t ci = 0; ci < g.c; ++ci)
      for (int64_t ky = 0; ky < g.kh; ++ky)
        for (int64_t kx = 0; kx < g.kw; ++kx)
          dw.f()[((o * g.c + ci) * g.kh + ky) * g.kw + kx] = partial[0][((ky * g.kw + kx) * g.c + ci) * g.opad() + o];
  return true;
}

}  // namespace towerjit::cpujit
