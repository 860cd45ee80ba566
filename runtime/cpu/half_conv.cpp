#include "runtime/cpu/half_conv.h"

#include <bit>
#include <vector>

#include "dsl/error.h"
#include "dsl/half_float.h"
#include "runtime/cpu/conv.h"
#include "runtime/cpu/gemm_half.h"

namespace towerjit::cpujit {
namespace {

// `v` rounded to bf16's bits, to nearest even. bf16 keeps f32's exponent, so rounding is on the
// bits: add 0x7fff plus the kept part's lowest bit, then drop the low half (a carry into the
// exponent is the correct rounding up, to infinity past the largest finite value); a NaN
// becomes the quiet NaN of its sign, as half_bits gives.
inline uint16_t narrow_bf16(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7fc0u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// The element loops with the dtype chosen outside them, so bf16's (a shift, and the rounding
// above) vectorise: widen_half called per element had cost more than the convolution (cnn's
// first layer 0.28 ms in f32, 1.46 in bf16).
View widened(const View& v, std::vector<float>& storage, ThreadPool* pool) {
  const int64_t n = v.shape.elements(0);
  storage.resize(static_cast<size_t>(n));
  const uint16_t* in = v.h();
  float* out = storage.data();
  parallel(pool, n, [&](int64_t first, int64_t last) {
    if (v.dtype == DType::bf16)
      for (int64_t i = first; i < last; ++i) out[i] = std::bit_cast<float>(static_cast<uint32_t>(in[i]) << 16);
    else
      for (int64_t i = first; i < last; ++i) out[i] = widen_half(in[i], v.dtype);
  });
  return View{v.shape, storage.data(), DType::f32};
}

void narrowed(const std::vector<float>& wide, const View& out, ThreadPool* pool) {
  uint16_t* to = out.h();
  const float* from = wide.data();
  parallel(pool, static_cast<int64_t>(wide.size()), [&](int64_t first, int64_t last) {
    if (out.dtype == DType::bf16)
      for (int64_t i = first; i < last; ++i) to[i] = narrow_bf16(from[i]);
    else
      for (int64_t i = first; i < last; ++i) to[i] = half_bits(from[i], out.dtype);
  });
}

}  // namespace

void half_convolution(Op op, const Attrs& at, const View& a, const View& b, const View& out, ThreadPool* pool) {
  internal_check(is_half_float(out.dtype) && a.dtype == out.dtype && b.dtype == out.dtype)
      << "a 16-bit convolution of " << dtype_name(a.dtype) << " and " << dtype_name(b.dtype) << " into "
      << dtype_name(out.dtype);
  // This thread's widened copies, kept from call to call (a step convolves many times; fresh
  // megabytes a call had cost their page faults every time). Named by references, which the
  // pool's workers share.
  thread_local std::vector<float> kept[3];
  std::vector<float>&wa = kept[0], &wb = kept[1], &wo = kept[2];
  wo.resize(static_cast<size_t>(out.shape.elements(0)));
  const View fa = widened(a, wa, pool), fb = widened(b, wb, pool), fo{out.shape, wo.data(), DType::f32};
  switch (op) {
    case Op::Conv2D: conv2d(at, fa, fb, fo, pool); break;
    case Op::Conv2DGradInput: conv2d_grad_input(at, fa, fb, fo, pool); break;
    case Op::Conv2DGradFilter: conv2d_grad_filter(at, fa, fb, fo, pool); break;
    default: internal_check(false) << "half_convolution of " << op_name(op);
  }
  narrowed(wo, out, pool);
}

}  // namespace towerjit::cpujit
