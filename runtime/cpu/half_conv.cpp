#include "runtime/cpu/half_conv.h"

#include <bit>
#include <vector>

#include "dsl/error.h"
#include "dsl/half_float.h"
#include "runtime/cpu/conv.h"

namespace towerjit::cpujit {
namespace {

float widen(uint16_t bits, DType t) {
  if (t == DType::bf16) return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
  return static_cast<float>(half_value(bits, t));  // f16: exact in f32
}

// `v` as f32 values in `storage`, viewed with v's shape.
View widened(const View& v, std::vector<float>& storage, ThreadPool* pool) {
  const int64_t n = v.shape.elements(0);
  storage.resize(static_cast<size_t>(n));
  parallel(pool, n, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) storage[i] = widen(v.h()[i], v.dtype);
  });
  return View{v.shape, storage.data(), DType::f32};
}

}  // namespace

void half_convolution(Op op, const Attrs& at, const View& a, const View& b, const View& out, ThreadPool* pool) {
  internal_check(is_half_float(out.dtype) && a.dtype == out.dtype && b.dtype == out.dtype)
      << "a 16-bit convolution of " << dtype_name(a.dtype) << " and " << dtype_name(b.dtype) << " into "
      << dtype_name(out.dtype);
  std::vector<float> wa, wb, wo(static_cast<size_t>(out.shape.elements(0)));
  const View fa = widened(a, wa, pool), fb = widened(b, wb, pool), fo{out.shape, wo.data(), DType::f32};
  switch (op) {
    case Op::Conv2D: conv2d(at, fa, fb, fo, pool); break;
    case Op::Conv2DGradInput: conv2d_grad_input(at, fa, fb, fo, pool); break;
    case Op::Conv2DGradFilter: conv2d_grad_filter(at, fa, fb, fo, pool); break;
    default: internal_check(false) << "half_convolution of " << op_name(op);
  }
  parallel(pool, static_cast<int64_t>(wo.size()), [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) out.h()[i] = half_bits(wo[i], out.dtype);
  });
}

}  // namespace towerjit::cpujit
