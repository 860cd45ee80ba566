#include "runtime/cpu/half_conv.h"

#include <vector>

#include "dsl/error.h"
#include "runtime/cpu/conv.h"
#include "runtime/cpu/conv_images.h"
#include "runtime/cpu/half_spans.h"
#include "runtime/cpu/direct_conv.h"

namespace towerjit::cpujit {
namespace {

// `v` as f32 values in `storage`, viewed with v's shape.
View widened(const View& v, std::vector<float>& storage, ThreadPool* pool) {
  const int64_t n = v.shape.elements(0);
  storage.resize(static_cast<size_t>(n));
  parallel(pool, n, [&](int64_t first, int64_t last) {
    widen_span(v.h() + first, storage.data() + first, last - first, v.dtype);
  });
  return View{v.shape, storage.data(), DType::f32};
}

// An op's two paths: the direct kernels, which take the 16-bit tensors an image at a time
// (conv_images.h) and return false where they do not cover the convolution, and conv.h's
// whole-tensor f32 function.
struct Paths {
  bool (*direct)(const Attrs&, const View&, const View&, const View&, ThreadPool*);
  void (*whole)(const Attrs&, const View&, const View&, const View&, ThreadPool*);
};

Paths paths(Op op) {
  switch (op) {
    case Op::Conv2D:  // no epilogue: the pass gives one only to an f32 result
      return {[](const Attrs& at, const View& x, const View& w, const View& y, ThreadPool* pool) {
                return direct_conv2d(at, x, w, y, pool);
              },
              [](const Attrs& at, const View& x, const View& w, const View& y, ThreadPool* pool) {
                conv2d(at, x, w, y, pool);
              }};
    case Op::Conv2DGradInput: return {direct_conv2d_grad_input, conv2d_grad_input};
    case Op::Conv2DGradFilter: return {direct_conv2d_grad_filter, conv2d_grad_filter};
    default: internal_check(false) << "half_convolution of " << op_name(op);
  }
  return {};
}

}  // namespace

void half_convolution(Op op, const Attrs& at, const View& a, const View& b, const View& out, ThreadPool* pool) {
  internal_check(is_half_float(out.dtype) && a.dtype == out.dtype && b.dtype == out.dtype)
      << "a 16-bit convolution of " << dtype_name(a.dtype) << " and " << dtype_name(b.dtype) << " into "
      << dtype_name(out.dtype);
  const Paths path = paths(op);
  if (path.direct(at, a, b, out, pool)) return;
  // Elsewhere (im2col + sgemm: the baseline level, a strided input gradient) the operands are
  // widened whole and the result rounded whole. This thread's copies are kept from call to
  // call (fresh megabytes a call had cost their page faults every time), named by references,
  // which the pool's workers share.
  thread_local std::vector<float> kept[3];
  std::vector<float>&wa = kept[0], &wb = kept[1], &wo = kept[2];
  wo.resize(static_cast<size_t>(out.shape.elements(0)));
  const View fa = widened(a, wa, pool), fb = widened(b, wb, pool), fo{out.shape, wo.data(), DType::f32};
  path.whole(at, fa, fb, fo, pool);
  parallel(pool, static_cast<int64_t>(wo.size()), [&](int64_t first, int64_t last) {
    narrow_span(wo.data() + first, out.h() + first, last - first, out.dtype);
  });
}

}  // namespace towerjit::cpujit
