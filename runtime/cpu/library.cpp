#include "runtime/cpu/library.h"

#include "runtime/cpu/blas.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "dsl/error.h"

namespace towerjit::cpu {
namespace {

// Row-major matrix product of the last two axes; leading axes broadcast numpy-style.
void matmul(const kir::LibraryCall& c, const View& a, const View& b, const View& out) {
  const int ra = a.shape.rank(), rb = b.shape.rank(), ro = out.shape.rank();
  const int64_t m = out.shape[ro - 2], n = out.shape[ro - 1];
  const int64_t k = c.transpose_a ? a.shape[ra - 2] : a.shape[ra - 1];
  int64_t batches = 1;
  for (int i = 0; i < ro - 2; ++i) batches *= out.shape[i];
  for (int64_t bi = 0; bi < batches; ++bi) {
    // Offsets of this output batch in a and b, honouring broadcast (size-1) batch axes.
    int64_t rem = bi, oa = 0, ob = 0, sa = m * k, sb = k * n;
    for (int i = ro - 3; i >= 0; --i) {
      const int64_t idx = rem % out.shape[i];
      rem /= out.shape[i];
      const int ia = i - (ro - ra), ib = i - (ro - rb);
      if (ia >= 0) { oa += (a.shape[ia] == 1 ? 0 : idx) * sa; sa *= a.shape[ia]; }
      if (ib >= 0) { ob += (b.shape[ib] == 1 ? 0 : idx) * sb; sb *= b.shape[ib]; }
    }
    blas().sgemm(CblasRowMajor, c.transpose_a ? CblasTrans : CblasNoTrans,
                c.transpose_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a.f() + oa,
                c.transpose_a ? m : k, b.f() + ob, c.transpose_b ? k : n, 0.0f,
                out.f() + bi * m * n, n);
  }
}

struct ConvGeometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  int stride_h, stride_w, pad_h, pad_w;
};

ConvGeometry geometry(const Attrs& at, const Shape& x, const Shape& w, const Shape& y) {
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3],
          at.stride[0], at.stride[1], at.pad[0], at.pad[1]};
}

// cols[(ci*kh + ky)*kw + kx][oy*ow + ox] = x[ci][oy*s - p + ky][ox*s - p + kx], zero outside.
void im2col(const ConvGeometry& g, const float* x, float* cols) {
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t ky = 0; ky < g.kh; ++ky)
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        float* row = cols + ((ci * g.kh + ky) * g.kw + kx) * g.oh * g.ow;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t iy = oy * g.stride_h - g.pad_h + ky;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t ix = ox * g.stride_w - g.pad_w + kx;
            const bool in = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
            row[oy * g.ow + ox] = in ? x[(ci * g.h + iy) * g.w + ix] : 0.0f;
          }
        }
      }
}

// The adjoint of im2col: adds each column entry back into the image it was read from.
void col2im(const ConvGeometry& g, const float* cols, float* x) {
  std::fill(x, x + g.c * g.h * g.w, 0.0f);
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t ky = 0; ky < g.kh; ++ky)
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const float* row = cols + ((ci * g.kh + ky) * g.kw + kx) * g.oh * g.ow;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t iy = oy * g.stride_h - g.pad_h + ky;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t ix = ox * g.stride_w - g.pad_w + kx;
            if (ix >= 0 && ix < g.w) x[(ci * g.h + iy) * g.w + ix] += row[oy * g.ow + ox];
          }
        }
      }
}

void conv2d(const Attrs& at, const View& x, const View& w, const View& y) {
  const ConvGeometry g = geometry(at, x.shape, w.shape, y.shape);
  const int64_t ckk = g.c * g.kh * g.kw, spatial = g.oh * g.ow;
  std::vector<float> cols(ckk * spatial);
  for (int64_t i = 0; i < g.n; ++i) {
    im2col(g, x.f() + i * g.c * g.h * g.w, cols.data());
    blas().sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.o, spatial, ckk, 1.0f, w.f(), ckk,
                cols.data(), spatial, 0.0f, y.f() + i * g.o * spatial, spatial);
  }
}

void conv2d_grad_input(const Attrs& at, const View& dy, const View& w, const View& dx) {
  const ConvGeometry g = geometry(at, dx.shape, w.shape, dy.shape);
  const int64_t ckk = g.c * g.kh * g.kw, spatial = g.oh * g.ow;
  std::vector<float> cols(ckk * spatial);
  for (int64_t i = 0; i < g.n; ++i) {
    blas().sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, spatial, g.o, 1.0f, w.f(), ckk,
                dy.f() + i * g.o * spatial, spatial, 0.0f, cols.data(), spatial);
    col2im(g, cols.data(), dx.f() + i * g.c * g.h * g.w);
  }
}

void conv2d_grad_filter(const Attrs& at, const View& x, const View& dy, const View& dw) {
  const ConvGeometry g = geometry(at, x.shape, dw.shape, dy.shape);
  const int64_t ckk = g.c * g.kh * g.kw, spatial = g.oh * g.ow;
  std::vector<float> cols(ckk * spatial);
  for (int64_t i = 0; i < g.n; ++i) {
    im2col(g, x.f() + i * g.c * g.h * g.w, cols.data());
    blas().sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g.o, ckk, spatial, 1.0f,
                dy.f() + i * g.o * spatial, spatial, cols.data(), spatial, i == 0 ? 0.0f : 1.0f,
                dw.f(), ckk);
  }
}

// Calls fn(plane, oy, ox, y0, x0) for every output position of every (n, c) plane, with the
// window's top-left corner in input coordinates.
template <typename Fn>
void for_each_window(const Attrs& at, const Shape& x, const Shape& y, Fn fn) {
  for (int64_t plane = 0; plane < x[0] * x[1]; ++plane)
    for (int64_t oy = 0; oy < y[2]; ++oy)
      for (int64_t ox = 0; ox < y[3]; ++ox)
        fn(plane, oy, ox, oy * at.stride[0] - at.pad[0], ox * at.stride[1] - at.pad[1]);
}

void pool(Op op, const Attrs& at, const std::vector<View>& in, const View& out) {
  const bool grad = op == Op::MaxPool2DGrad || op == Op::AvgPool2DGrad;
  const Shape& xs = grad ? out.shape : in[0].shape;
  const Shape& ys = grad ? in.back().shape : out.shape;
  const int64_t h = xs[2], w = xs[3], kh = at.kernel[0], kw = at.kernel[1];
  if (grad) std::fill(out.f(), out.f() + out.shape.elements(0), 0.0f);
  for_each_window(at, xs, ys, [&](int64_t plane, int64_t oy, int64_t ox, int64_t y0, int64_t x0) {
    const int64_t o = (plane * ys[2] + oy) * ys[3] + ox;
    if (op == Op::AvgPool2D || op == Op::AvgPool2DGrad) {
      double sum = 0;
      for (int64_t dy = 0; dy < kh; ++dy)
        for (int64_t dx = 0; dx < kw; ++dx) {
          const int64_t iy = y0 + dy, ix = x0 + dx;
          if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
          const int64_t i = (plane * h + iy) * w + ix;
          if (op == Op::AvgPool2D) sum += in[0].f()[i];
          else out.f()[i] += in[0].f()[o] / static_cast<float>(kh * kw);
        }
      if (op == Op::AvgPool2D) out.f()[o] = static_cast<float>(sum / (kh * kw));
      return;
    }
    float best = -std::numeric_limits<float>::infinity();
    int64_t arg = -1;  // first maximum in row-major window order
    for (int64_t dy = 0; dy < kh; ++dy)
      for (int64_t dx = 0; dx < kw; ++dx) {
        const int64_t iy = y0 + dy, ix = x0 + dx;
        if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
        const int64_t i = (plane * h + iy) * w + ix;
        if (arg < 0 || in[0].f()[i] > best) best = in[0].f()[i], arg = i;
      }
    if (op == Op::MaxPool2D) out.f()[o] = best;
    else if (arg >= 0) out.f()[arg] += in[1].f()[o];
  });
}

void one_hot(const Node& node, const View& labels, const View& out) {
  const int64_t depth = node.attrs.depth, count = labels.shape.elements(0);
  std::fill(out.f(), out.f() + count * depth, 0.0f);
  for (int64_t i = 0; i < count; ++i) {
    const int32_t v = labels.i()[i];
    user_check(v >= 0 && v < depth, node.loc)
        << "one_hot: label " << v << " at flat index " << i << " is out of range [0, " << depth
        << ")" << (node.scope.empty() ? "" : " in \"" + node.scope + "\"")
        << "; labels must be class indices below the number of classes";
    out.f()[i * depth + v] = 1.0f;
  }
}

void argmax(const Node& node, const View& x, const View& out) {
  const int axis = node.attrs.axis;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= x.shape[i];
  for (int i = axis + 1; i < x.shape.rank(); ++i) inner *= x.shape[i];
  const int64_t n = x.shape[axis];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      int64_t best = 0;
      for (int64_t j = 1; j < n; ++j)
        if (x.f()[(o * n + j) * inner + in] > x.f()[(o * n + best) * inner + in]) best = j;
      out.i()[o * inner + in] = static_cast<int32_t>(best);
    }
}

// Copies `src` into the box of `dst` starting at `origin` (pad writes inside zeros, concat
// writes each part at its offset along the axis). Rows of the last axis move with memcpy.
void copy_box(const View& src, const View& dst, const std::vector<int64_t>& origin) {
  const int r = src.shape.rank();
  if (r == 0) { std::memcpy(dst.data, src.data, 4); return; }
  const int64_t rows = src.shape.elements(0) / src.shape[r - 1];
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rem = row, off = origin[r - 1], stride = dst.shape[r - 1];
    for (int i = r - 2; i >= 0; --i) {
      off += (rem % src.shape[i] + origin[i]) * stride;
      rem /= src.shape[i];
      stride *= dst.shape[i];
    }
    std::memcpy(static_cast<char*>(dst.data) + off * 4,
                static_cast<const char*>(src.data) + row * src.shape[r - 1] * 4, src.shape[r - 1] * 4);
  }
}

}  // namespace

void run_library_call(const kir::LibraryCall& call, const Node& node,
                      const std::vector<View>& in, const View& out) {
  switch (call.op) {
    case Op::MatMul: return matmul(call, in[0], in[1], out);
    case Op::Conv2D: return conv2d(call.attrs, in[0], in[1], out);
    case Op::Conv2DGradInput: return conv2d_grad_input(call.attrs, in[0], in[1], out);
    case Op::Conv2DGradFilter: return conv2d_grad_filter(call.attrs, in[0], in[1], out);
    case Op::MaxPool2D: case Op::MaxPool2DGrad: case Op::AvgPool2D: case Op::AvgPool2DGrad:
      return pool(call.op, call.attrs, in, out);
    case Op::OneHot: return one_hot(node, in[0], out);
    case Op::ArgMax: return argmax(node, in[0], out);
    case Op::Pad:
      std::memset(out.data, 0, out.shape.elements(0) * 4);
      return copy_box(in[0], out, call.attrs.begin);
    case Op::Concat: {
      std::vector<int64_t> origin(out.shape.rank(), 0);
      for (const View& part : in) {
        copy_box(part, out, origin);
        origin[call.attrs.axis] += part.shape[call.attrs.axis];
      }
      return;
    }
    default:
      internal_check(false) << "no CPU library routine for " << op_name(call.op);
  }
}

}  // namespace towerjit::cpu
