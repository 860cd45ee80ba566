// Gradients on the wire in 16 bits (TowerStrategyOptions::gradient_compression): f32 values
// rounded to bf16 or f16 (to nearest, ties to even; NaN stays a quiet NaN of its sign, beyond
// the largest finite value an infinity, subnormals kept) and widened back. The same results as
// dsl/half_float.h's half_bits / half_value, which define the rounding for every side, here by
// bit operations on floats so that a bucket of millions of elements converts at memory speed
// (tests/runtime/test_half_wire.cpp checks them against half_bits).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "dsl/dtype.h"

namespace towerjit::dist {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t to_bf16(float f) {
  uint32_t u = float_bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x7FC0);
  u += 0x7FFF + ((u >> 16) & 1);  // ties to even: a carry into the exponent is right (up to inf)
  return static_cast<uint16_t>(u >> 16);
}

inline float from_bf16(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t to_f16(float f) {
  uint32_t u = float_bits(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  u &= 0x7FFFFFFF;
  if (u > 0x7F800000) return sign | 0x7E00;     // NaN: quiet
  if (u >= 0x477FF000) return sign | 0x7C00;    // from 65520 on (ties to even included): inf
  if (u < 0x38800000)                           // below 2^-14: a subnormal, in units of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(bits_float(u) * 16777216.0f));  // exact scaling
  u += 0xC8000000u + 0xFFF + ((u >> 13) & 1);   // exponent rebiased (127 -> 15), ties to even
  return sign | static_cast<uint16_t>(u >> 13);
}

inline float from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
  if (e == 0) return bits_float(sign) + (sign ? -1.0f : 1.0f) * static_cast<float>(m) * 0x1p-24f;
  if (e == 31) return bits_float(sign | 0x7F800000 | (m << 13));
  return bits_float(sign | ((e + 112) << 23) | (m << 13));
}

inline uint16_t to_wire(float f, DType format) { return format == DType::bf16 ? to_bf16(f) : to_f16(f); }
inline float from_wire(uint16_t h, DType format) { return format == DType::bf16 ? from_bf16(h) : from_f16(h); }

// a + b as one rounding to `format` (the sum taken in double, where two 16-bit numbers add
// exactly or the rounding cannot land on a tie): the step of a 16-bit all-reduce.
inline uint16_t add_on_wire(uint16_t a, uint16_t b, DType format) {
  const double sum = static_cast<double>(from_wire(a, format)) + static_cast<double>(from_wire(b, format));
  return to_wire(static_cast<float>(sum), format);
}

}  // namespace towerjit::dist
