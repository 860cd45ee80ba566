#include "runtime/cpu/conv.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/cpu/conv_geometry.h"
#include "runtime/cpu/conv_images.h"
#include "runtime/cpu/direct_conv.h"
#include "runtime/cpu/gemm.h"

namespace towerjit::cpujit {
namespace {

using Geometry = ConvGeometry;

// The output columns [x0, x1) whose input column ox*s - p + k lies inside [0, w).
void valid_range(int64_t out, int64_t in, int64_t s, int64_t p, int64_t k, int64_t& x0, int64_t& x1) {
  x0 = std::clamp<int64_t>((p - k + s - 1) / s, 0, out);
  x1 = std::clamp<int64_t>((in + p - k + s - 1) / s, x0, out);
}

// Image i's columns into cols[(ci*kh + ky)*kw + kx][i*S + oy*ow + ox] (row length n*S), zeros
// where the window hangs over the padding. The in-image part of a row is one copy at stride 1.
void im2col(const Geometry& g, const float* x, float* cols, int64_t i) {
  const int64_t row = g.n * g.spatial();
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t ky = 0; ky < g.kh; ++ky)
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        float* out = cols + ((ci * g.kh + ky) * g.kw + kx) * row + i * g.spatial();
        const float* plane = x + (i * g.c + ci) * g.h * g.w;
        int64_t x0, x1;
        valid_range(g.ow, g.w, g.sw, g.pw, kx, x0, x1);
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t iy = oy * g.sh - g.ph + ky;
          float* dst = out + oy * g.ow;
          if (iy < 0 || iy >= g.h) { std::fill(dst, dst + g.ow, 0.0f); continue; }
          std::fill(dst, dst + x0, 0.0f);
          std::fill(dst + x1, dst + g.ow, 0.0f);
          const float* src = plane + iy * g.w - g.pw + kx;
          if (g.sw == 1) std::copy(src + x0, src + x1, dst + x0);
          else for (int64_t ox = x0; ox < x1; ++ox) dst[ox] = src[ox * g.sw];
        }
      }
}

// The adjoint of im2col for image i: adds each column entry back where it was read from.
void col2im(const Geometry& g, const float* cols, float* x, int64_t i) {
  const int64_t row = g.n * g.spatial();
  float* image = x + i * g.c * g.h * g.w;
  std::fill(image, image + g.c * g.h * g.w, 0.0f);
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t ky = 0; ky < g.kh; ++ky)
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const float* in = cols + ((ci * g.kh + ky) * g.kw + kx) * row + i * g.spatial();
        float* plane = image + ci * g.h * g.w;
        int64_t x0, x1;
        valid_range(g.ow, g.w, g.sw, g.pw, kx, x0, x1);
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t iy = oy * g.sh - g.ph + ky;
          if (iy < 0 || iy >= g.h) continue;
          float* dst = plane + iy * g.w - g.pw + kx;
          const float* src = in + oy * g.ow;
          for (int64_t ox = x0; ox < x1; ++ox) dst[ox * g.sw] += src[ox];
        }
      }
}

// [a, b, s] -> [b, a, s]: between NCHW ([N, O, S]) and the GEMM's [O, N*S].
void swap_outer(const float* in, float* out, int64_t a, int64_t b, int64_t s, ThreadPool* pool) {
  parallel(pool, a, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      for (int64_t j = 0; j < b; ++j) std::memcpy(out + (j * a + i) * s, in + (i * b + j) * s, s * 4);
  });
}

void build_columns(const Geometry& g, const float* x, float* cols, ThreadPool* pool) {
  parallel(pool, g.n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) im2col(g, x, cols, i);
  });
}

}  // namespace

void parallel(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  if (pool) pool->parallel_for(n, body);
  else body(0, n);
}

namespace {

// The batched im2col path (y in f32, written whole), the epilogue's act after the product.
void im2col_conv2d(const Attrs& at, const View& x, const View& w, const View& y, ThreadPool* pool,
                   const ConvEpilogue& epilogue) {
  const Geometry g = conv_geometry(at, x.shape, w.shape, y.shape);
  const int64_t cols_n = g.n * g.spatial();
  float* cols = conv_scratch(0, g.ckk() * cols_n);
  float* out = conv_scratch(1, g.o * cols_n);
  build_columns(g, x.f(), cols, pool);
  sgemm(pool, false, false, g.o, cols_n, g.ckk(), w.f(), g.ckk(), cols, cols_n, 0.0f, out, cols_n);
  swap_outer(out, y.f(), g.o, g.n, g.spatial(), pool);  // [O, N, S] -> [N, O, S]
  if (epilogue.kind != kir::Epilogue::none)
    parallel(pool, g.n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) epilogue.apply(y.f() + i * g.o * g.spatial(), g.o, g.spatial());
    });
}

}  // namespace

void conv2d(const Attrs& at, const View& x, const View& w, const View& y, ThreadPool* pool,
            const ConvEpilogue& epilogue) {
  if (direct_conv2d(at, x, w, y, pool, epilogue)) return;
  if (!epilogue.pools()) return im2col_conv2d(at, x, w, y, pool, epilogue);
  // With a pool, the whole result into a temporary first, then each image pooled.
  std::vector<float> result(static_cast<size_t>(y.shape.elements(0)));
  ConvEpilogue act = epilogue;
  act.pooled = nullptr, act.codes = nullptr;
  im2col_conv2d(at, x, w, {y.shape, result.data(), DType::f32}, pool, act);
  parallel(pool, y.shape[0], [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) epilogue.image_done(y, i, result.data() + i * (result.size() / y.shape[0]));
  });
}

void conv2d_grad_input(const Attrs& at, const View& routed_dy, const View& w, const View& dx, ThreadPool* pool) {
  if (direct_conv2d_grad_input(at, routed_dy, w, dx, pool)) return;
  std::vector<float> keep;
  const View dy = in_memory(routed_dy, keep, pool);
  const Geometry g = conv_geometry(at, dx.shape, w.shape, dy.shape);
  const int64_t cols_n = g.n * g.spatial();
  float* dy_t = conv_scratch(1, g.o * cols_n);
  float* cols = conv_scratch(0, g.ckk() * cols_n);
  swap_outer(dy.f(), dy_t, g.n, g.o, g.spatial(), pool);  // [N, O, S] -> [O, N, S]
  sgemm(pool, true, false, g.ckk(), cols_n, g.o, w.f(), g.ckk(), dy_t, cols_n, 0.0f, cols, cols_n);
  parallel(pool, g.n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) col2im(g, cols, dx.f(), i);
  });
}

void conv2d_grad_filter(const Attrs& at, const View& x, const View& routed_dy, const View& dw, ThreadPool* pool) {
  if (direct_conv2d_grad_filter(at, x, routed_dy, dw, pool)) return;
  std::vector<float> keep;
  const View dy = in_memory(routed_dy, keep, pool);
  const Geometry g = conv_geometry(at, x.shape, dw.shape, dy.shape);
  const int64_t cols_n = g.n * g.spatial();
  float* cols = conv_scratch(0, g.ckk() * cols_n);
  float* dy_t = conv_scratch(1, g.o * cols_n);
  build_columns(g, x.f(), cols, pool);
  swap_outer(dy.f(), dy_t, g.n, g.o, g.spatial(), pool);
  sgemm(pool, false, true, g.o, g.ckk(), cols_n, dy_t, cols_n, cols, cols_n, 0.0f, dw.f(), g.ckk());
}

}  // namespace towerjit::cpujit
