#include "runtime/cpu/pool.h"

#include <algorithm>
#include <limits>

#include "runtime/cpu/conv.h"

namespace towerjit::cpu {
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

// The first maximum of the window in row-major order (what the reference's gradient follows).
int64_t argmax_in(const Window& g, const float* plane, int64_t oy, int64_t ox) {
  int64_t y0, y1, x0, x1;
  g.clip(oy, ox, y0, y1, x0, x1);
  int64_t best = y0 * g.w + x0;
  for (int64_t y = y0; y < y1; ++y)
    for (int64_t x = x0; x < x1; ++x)
      if (plane[y * g.w + x] > plane[best]) best = y * g.w + x;
  return best;
}

void pool_plane(Op op, const Window& g, const float* x, const float* dy, float* out) {
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

void pool2d(Op op, const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool) {
  const bool grad = op == Op::MaxPool2DGrad || op == Op::AvgPool2DGrad;
  const Shape& xs = grad ? out.shape : in[0].shape;
  const Shape& ys = grad ? in.back().shape : out.shape;
  const Window g{xs[2], xs[3], ys[2], ys[3], at.kernel[0], at.kernel[1],
                 at.stride[0], at.stride[1], at.pad[0], at.pad[1]};
  const int64_t planes = xs[0] * xs[1], in_plane = g.h * g.w, out_plane = g.oh * g.ow;
  parallel(pool, planes, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const float* x = op == Op::AvgPool2DGrad ? nullptr : in[0].f() + p * in_plane;
      const float* dy = grad ? in.back().f() + p * out_plane : nullptr;
      float* o = out.f() + p * (grad ? in_plane : out_plane);
      pool_plane(op, g, x, dy, o);
    }
  });
}

}  // namespace towerjit::cpu
