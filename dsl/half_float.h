// Rounding to bf16 and f16, round to nearest, ties to even, and their bit patterns. One
// definition for every side: the reference interpreter rounds its doubles with round_to(), the
// runtime converts host tensors with the *_bits functions, and the CPU JIT's kernels do the
// same rounding on f32 values (jit/cpu/llvm_emitter.cpp), which the tests check bit for bit.
// Rounding from a double here is one rounding (no detour through f32).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "dsl/dtype.h"

namespace towerjit {

// A 16-bit float format: significant bits (with the implicit one), the exponent of the
// smallest normal number, and the largest finite value.
struct HalfFormat {
  int precision;
  int min_exponent;
  double max_finite;
};
constexpr HalfFormat kBf16Format{8, -126, 0x1.FEp127};
constexpr HalfFormat kF16Format{11, -14, 65504.0};
constexpr HalfFormat half_format(DType t) { return t == DType::bf16 ? kBf16Format : kF16Format; }

// The unit roundoff of a dtype: half the distance from 1 to the next number (2^-8 for bf16,
// 2^-11 for f16, 2^-24 for f32); 0 for i32.
constexpr double unit_roundoff(DType t) {
  return t == DType::bf16 ? 0x1p-8 : t == DType::f16 ? 0x1p-11 : t == DType::f32 ? 0x1p-24 : 0;
}

// `x` rounded to the format (nearest, ties to even; beyond the largest finite value by half
// an ulp or more: infinity). NaN, infinities and zeros stay as they are.
inline double round_to_half(double x, const HalfFormat& f) {
  if (!std::isfinite(x) || x == 0) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| = m 2^e, m in [0.5, 1): the leading bit is 2^(e-1)
  const int ulp = std::max(e - 1, f.min_exponent) - (f.precision - 1);
  const double r = std::ldexp(std::nearbyint(std::ldexp(x, -ulp)), ulp);
  if (std::fabs(r) > f.max_finite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}

// `x` as dtype `t` holds it: rounded for bf16 and f16, to float for f32, unchanged for i32.
inline double round_to(DType t, double x) {
  if (is_half_float(t)) return round_to_half(x, half_format(t));
  return t == DType::f32 ? static_cast<double>(static_cast<float>(x)) : x;
}

// The bit pattern of `x` rounded to bf16 / f16. A NaN becomes a quiet NaN of its sign.
inline uint16_t half_bits(double x, DType t) {
  const HalfFormat f = half_format(t);
  const int mantissa_bits = f.precision - 1, bias = 1 - f.min_exponent;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const uint16_t exp_mask = static_cast<uint16_t>(((1 << (15 - mantissa_bits)) - 1) << mantissa_bits);
  if (std::isnan(x)) return sign | exp_mask | (1u << (mantissa_bits - 1));
  const double r = std::fabs(round_to_half(x, f));
  if (std::isinf(r)) return sign | exp_mask;
  if (r == 0) return sign;
  const int min_exp = f.min_exponent;
  if (r < std::ldexp(1.0, min_exp))  // subnormal: the significand counts ulps of 2^(min - p + 1)
    return sign | static_cast<uint16_t>(std::ldexp(r, mantissa_bits - min_exp));
  const int e = std::ilogb(r);
  const auto m = static_cast<uint16_t>(std::ldexp(r, mantissa_bits - e) - (1 << mantissa_bits));
  return sign | static_cast<uint16_t>((e + bias) << mantissa_bits) | m;
}

// The value of a bf16 / f16 bit pattern.
inline double half_value(uint16_t bits, DType t) {
  if (t == DType::bf16) {
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float v;
    std::memcpy(&v, &wide, 4);
    return v;
  }
  const int e = (bits >> 10) & 0x1F, m = bits & 0x3FF;
  const double s = bits & 0x8000 ? -1 : 1;
  if (e == 0x1F) return m ? std::numeric_limits<double>::quiet_NaN() * s : s * std::numeric_limits<double>::infinity();
  if (e == 0) return s * std::ldexp(m, -24);
  return s * std::ldexp(1024 + m, e - 25);
}

}  // namespace towerjit
