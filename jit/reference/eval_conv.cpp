// Convolutions and pools over NCHW, with their gradients. Each forward op and its gradients
// walk the same index relation (conv_taps, pool_window), so they are adjoint by construction.
#include <cmath>
#include <limits>

#include "dsl/error.h"
#include "jit/reference/eval.h"

namespace towerjit::reference {

namespace {

// x [N, C, H, W], w [O, C, KH, KW], y [N, O, OH, OW], with attrs.stride and attrs.pad.
struct ConvGeometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  int sh, sw, ph, pw;
};

ConvGeometry conv_geometry(const Shape& x, const Shape& w, const Shape& y, const Attrs& attrs) {
  internal_check(x.rank() == 4 && w.rank() == 4 && y.rank() == 4)
      << "conv2d shapes " << x.str() << " " << w.str() << " " << y.str();
  internal_check(x[1] == w[1] && y[0] == x[0] && y[1] == w[0]) << "conv2d channels";
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3],
          attrs.stride[0], attrs.stride[1], attrs.pad[0], attrs.pad[1]};
}

// Calls f(x index, w index, y index) for every product term of the convolution: y[n,o,oh,ow]
// takes x[n,c,oh*sh-ph+i, ow*sw-pw+j] * w[o,c,i,j] where that x is inside (else padding: 0).
template <typename F>
void conv_taps(const ConvGeometry& g, F f) {
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const int64_t y = ((n * g.o + o) * g.oh + oh) * g.ow + ow;
          for (int64_t c = 0; c < g.c; ++c)
            for (int64_t i = 0; i < g.kh; ++i)
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t ih = oh * g.sh - g.ph + i, iw = ow * g.sw - g.pw + j;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                f(((n * g.c + c) * g.h + ih) * g.w + iw, ((o * g.c + c) * g.kh + i) * g.kw + j,
                  y);
              }
        }
}

// x [N, C, H, W] pooled to y [N, C, OH, OW] with attrs.kernel, attrs.stride, attrs.pad.
struct PoolGeometry {
  int64_t n, c, h, w, oh, ow;
  int kh, kw, sh, sw, ph, pw;
};

PoolGeometry pool_geometry(const Shape& x, const Shape& y, const Attrs& attrs) {
  internal_check(x.rank() == 4 && y.rank() == 4 && x[0] == y[0] && x[1] == y[1])
      << "pool shapes " << x.str() << " " << y.str();
  return {x[0],           x[1],           x[2],        x[3],        y[2],        y[3],
          attrs.kernel[0], attrs.kernel[1], attrs.stride[0], attrs.stride[1], attrs.pad[0],
          attrs.pad[1]};
}

// Calls f(y index, x indices inside the window, in row-major order) for every output element.
template <typename F>
void pool_windows(const PoolGeometry& g, F f) {
  std::vector<int64_t> inside;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          inside.clear();
          for (int i = 0; i < g.kh; ++i)
            for (int j = 0; j < g.kw; ++j) {
              const int64_t ih = oh * g.sh - g.ph + i, iw = ow * g.sw - g.pw + j;
              if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
                inside.push_back(((n * g.c + c) * g.h + ih) * g.w + iw);
            }
          f(((n * g.c + c) * g.oh + oh) * g.ow + ow, inside);
        }
}

// The first position of the window's maximum; -1 for a window all padding. A NaN counts as
// larger than every number (the first NaN wins), so the pool's value is NaN wherever its window
// holds one and the gradient goes to that NaN, as PyTorch's max_pool2d.
int64_t first_max(const Array& x, const std::vector<int64_t>& inside) {
  int64_t best = -1;
  for (int64_t at : inside)
    if (best < 0 || x[at] > x[best] || (std::isnan(x[at]) && !std::isnan(x[best]))) best = at;
  return best;
}

// Gradient ops carry their result's shape in attrs.shape; it must be the node's.
void check_result_shape(const EvalArgs& a) {
  const Shape& want = a.node.attrs.shape;
  internal_check(want.rank() == 0 || want.bind(a.batch) == a.shape)
      << op_name(a.node.op) << ": attrs.shape " << want.str() << " but node shape "
      << a.node.shape.str();
}

}  // namespace

Array eval_conv2d(const EvalArgs& a) {
  const Array &x = a.in(0), &w = a.in(1);
  Array y = a.result();
  conv_taps(conv_geometry(x.shape, w.shape, y.shape, a.node.attrs),
            [&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += x[xi] * w[wi]; });
  return y;
}

Array eval_conv2d_grad_input(const EvalArgs& a) {
  const Array &dy = a.in(0), &w = a.in(1);
  Array dx = a.result();
  check_result_shape(a);
  conv_taps(conv_geometry(dx.shape, w.shape, dy.shape, a.node.attrs),
            [&](int64_t xi, int64_t wi, int64_t yi) { dx[xi] += dy[yi] * w[wi]; });
  return dx;
}

Array eval_conv2d_grad_filter(const EvalArgs& a) {
  const Array &x = a.in(0), &dy = a.in(1);
  Array dw = a.result();
  check_result_shape(a);
  conv_taps(conv_geometry(x.shape, dw.shape, dy.shape, a.node.attrs),
            [&](int64_t xi, int64_t wi, int64_t yi) { dw[wi] += x[xi] * dy[yi]; });
  return dw;
}

Array eval_max_pool2d(const EvalArgs& a) {
  const Array& x = a.in(0);
  Array y = a.result();
  // Padding is -infinity: only positions inside the image can be the maximum.
  pool_windows(pool_geometry(x.shape, y.shape, a.node.attrs),
               [&](int64_t yi, const std::vector<int64_t>& inside) {
                 const int64_t best = first_max(x, inside);
                 y[yi] = best < 0 ? -std::numeric_limits<double>::infinity() : x[best];
               });
  return y;
}

Array eval_max_pool2d_grad(const EvalArgs& a) {
  const Array &x = a.in(0), &dy = a.in(1);
  Array dx = a.result();
  const bool relu_mask = a.node.attrs.relu_mask;  // dy only to maxima > 0 (NaN is not)
  pool_windows(pool_geometry(x.shape, dy.shape, a.node.attrs),
               [&](int64_t yi, const std::vector<int64_t>& inside) {
                 const int64_t best = first_max(x, inside);
                 if (best >= 0 && (!relu_mask || x[best] > 0)) dx[best] += dy[yi];
               });
  return dx;
}

// dy goes to the window's first maximum. Where another position of the window lies within the
// errors of that maximum, a backend may route dy there instead: every such candidate may be
// off by |dy| (plus dy's own error). Overlapping windows add their dy into one dx, which rounds.
// With a ReLU's mask (relu_mask), a maximum within its error of 0 may be masked or not.
Array max_pool2d_grad_bound(const EvalArgs& a, const Array& x_bound, const Array& dy_bound) {
  const Array &x = a.in(0), &dy = a.in(1);
  const PoolGeometry g = pool_geometry(x.shape, dy.shape, a.node.attrs);
  const double overlap = double((g.kh + g.sh - 1) / g.sh) * double((g.kw + g.sw - 1) / g.sw);
  const double sum_rounding = overlap > 1 ? rounding_gamma(overlap) : 0;
  Array out = a.result();
  pool_windows(g, [&](int64_t yi, const std::vector<int64_t>& inside) {
    const int64_t best = first_max(x, inside);
    if (best < 0) return;
    const double moved = std::fabs(dy[yi]) + dy_bound[yi];
    bool routed = true;
    for (int64_t at : inside) {
      const double room = x_bound[best] + x_bound[at];
      if (at != best && room > 0 && x[best] - x[at] <= room) routed = false, out[at] += moved;
    }
    const bool masked_maybe = a.node.attrs.relu_mask && std::fabs(x[best]) <= x_bound[best];
    out[best] += (routed && !masked_maybe ? dy_bound[yi] : moved) + sum_rounding * std::fabs(dy[yi]);
  });
  return out;
}

Array eval_avg_pool2d(const EvalArgs& a) {
  const Array& x = a.in(0);
  Array y = a.result();
  const double window = a.node.attrs.kernel[0] * a.node.attrs.kernel[1];
  // Padding counts as zeros: the divisor is always the whole window.
  pool_windows(pool_geometry(x.shape, y.shape, a.node.attrs),
               [&](int64_t yi, const std::vector<int64_t>& inside) {
                 double sum = 0;
                 for (int64_t at : inside) sum += x[at];
                 y[yi] = sum / window;
               });
  return y;
}

Array eval_avg_pool2d_grad(const EvalArgs& a) {
  const Array& dy = a.in(0);
  Array dx = a.result();
  check_result_shape(a);
  const double window = a.node.attrs.kernel[0] * a.node.attrs.kernel[1];
  pool_windows(pool_geometry(dx.shape, dy.shape, a.node.attrs),
               [&](int64_t yi, const std::vector<int64_t>& inside) {
                 for (int64_t at : inside) dx[at] += dy[yi] / window;
               });
  return dx;
}

}  // namespace towerjit::reference
