#include "runtime/cpu/half_conv.h"

#include <bit>
#include <vector>

#include "dsl/error.h"
#include "dsl/half_float.h"
#include "runtime/cpu/conv.h"
#include "runtime/cpu/gemm_half.h"

namespace towerjit::cpujit {
namespace {

// `v` rounded to `t`'s bits, to nearest even. bf16 keeps f32's exponent, so rounding is on the
// bits: add 0x7fff plus the kept part's lowest bit, then drop the low half (a carry into the
// exponent is the correct rounding up, to infinity past the largest finite value); a NaN
// becomes the quiet NaN of its sign, as half_bits gives. f16 goes through half_bits.
uint16_t narrow(float v, DType t) {
  if (t != DType::bf16) return half_bits(v, t);
  const uint32_t u = std::bit_cast<uint32_t>(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7fc0u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// `v` as f32 values in `storage`, viewed with v's shape.
View widened(const View& v, std::vector<float>& storage, ThreadPool* pool) {
  const int64_t n = v.shape.elements(0);
  storage.resize(static_cast<size_t>(n));
  parallel(pool, n, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) storage[i] = widen_half(v.h()[i], v.dtype);
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
    for (int64_t i = first; i < last; ++i) out.h()[i] = narrow(wo[i], out.dtype);
  });
}

}  // namespace towerjit::cpujit
