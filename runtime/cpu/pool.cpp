#include "runtime/cpu/pool.h"

#include <algorithm>
#include <limits>

#include "runtime/cpu/conv.h"

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

// Every window inside the image (no padding, none cut off): the common 2x2 / stride 2 case,
// without the clipping of the general path.
bool all_inside(const Window& g) {
  return g.ph == 0 && g.pw == 0 && (g.oh - 1) * g.sh + g.kh <= g.h && (g.ow - 1) * g.sw + g.kw <= g.w;
}

void max_plane_inside(const Window& g, const float* x, const float* dy, float* out, bool grad) {
  if (!grad && g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2) {
    // The usual 2x2 / stride 2 pool: two rows in, one row out, no index bookkeeping.
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      const float* r0 = x + 2 * oy * g.w;
      const float* r1 = r0 + g.w;
      for (int64_t ox = 0; ox < g.ow; ++ox)
        out[oy * g.ow + ox] = std::max(std::max(r0[2 * ox], r0[2 * ox + 1]),
                                       std::max(r1[2 * ox], r1[2 * ox + 1]));
    }
    return;
  }
  if (grad) std::fill(out, out + g.h * g.w, 0.0f);
  if (grad && g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2) {
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int64_t at = 2 * oy * g.w + 2 * ox;
        const int64_t cell[4] = {at, at + 1, at + g.w, at + g.w + 1};
        int best = 0;  // the first maximum in row-major order, as the reference
        for (int j = 1; j < 4; ++j)
          if (x[cell[j]] > x[cell[best]]) best = j;
        out[cell[best]] = dy[oy * g.ow + ox];
      }
    return;
  }
  for (int64_t oy = 0; oy < g.oh; ++oy)
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const float* corner = x + oy * g.sh * g.w + ox * g.sw;
      int64_t best = 0;  // first maximum in row-major order
      for (int64_t y = 0; y < g.kh; ++y)
        for (int64_t xx = 0; xx < g.kw; ++xx)
          if (corner[y * g.w + xx] > corner[best]) best = y * g.w + xx;
      if (grad) out[oy * g.sh * g.w + ox * g.sw + best] += dy[oy * g.ow + ox];
      else out[oy * g.ow + ox] = corner[best];
    }
}

void pool_plane(Op op, const Window& g, const float* x, const float* dy, float* out) {
  if ((op == Op::MaxPool2D || op == Op::MaxPool2DGrad) && all_inside(g))
    return max_plane_inside(g, x, dy, out, op == Op::MaxPool2DGrad);
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

}  // namespace towerjit::cpujit
