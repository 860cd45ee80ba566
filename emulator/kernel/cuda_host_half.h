// CUDA's 16-bit floats for the emulated GPU's host compile: __nv_bfloat16 (cuda_bf16.h) and
// __half (cuda_fp16.h) as their bit patterns, with the conversions the emitted kernels call
// (jit/cuda/kernel_writer.cpp: __bfloat162float, __float2bfloat16_rn, __half2float,
// __float2half_rn). Included by cuda_host.h; self-contained (plain C++17, no CUDA headers),
// so tests include it too.
//
// The rounding must match dsl/half_float.h, which every other side uses (the reference
// interpreter, the runtime's host conversions, the CPU JIT): to nearest, ties to even;
// beyond the largest finite value by half an ulp or more, an infinity; subnormals kept. A NaN
// stays a NaN of its sign, made quiet (the CPU JIT's rule: the payload's top bits kept, the
// quiet bit set, so it can never round into an infinity). This header is compiled apart from
// towerjit's tree, so it cannot include half_float.h: tests/emulator/test_host_half.cpp checks
// the two against each other on every bf16 and f16 bit pattern and on the rounding cases.
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  unsigned short __x;
};
struct __half {
  unsigned short __x;
};

namespace tj_emu {

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bf16 is f32's top half: add 0x7FFF plus the lowest kept bit, keep the top half (a carry
// into the exponent gives the next binade, or an infinity past the largest value).
inline unsigned short bf16_bits(float f) {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<unsigned short>((x | 0x00400000u) >> 16);  // NaN
  return static_cast<unsigned short>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// IEEE half: 5 exponent bits (bias 15), 10 stored mantissa bits, subnormals below 2^-14.
inline unsigned short f16_bits(float f) {
  const std::uint32_t x = float_bits(f), ax = x & 0x7FFFFFFFu;
  const auto sign = static_cast<unsigned short>((x >> 16) & 0x8000u);
  if (ax > 0x7F800000u) return sign | 0x7E00u | static_cast<unsigned short>((ax >> 13) & 0x3FFu);  // NaN, quiet
  if (ax >= 0x477FF000u) return sign | 0x7C00u;  // 65520 (65504 + half an ulp) or more: infinity
  if (ax < 0x38800000u) {
    // Below 2^-14: a multiple of 2^-24. |f| * 2^24 is exact in float (a power of two), and
    // the integer nearest it, ties to even, is the significand (1024 is the smallest normal).
    const float scaled = bits_float(ax) * 16777216.0f;
    auto m = static_cast<std::uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(m);  // exact: scaled < 1024
    if (rest > 0.5f || (rest == 0.5f && (m & 1u))) ++m;
    return sign | static_cast<unsigned short>(m);
  }
  // Normal: round the 23 mantissa bits to 10 at bit 13 (ties to even), then rebias the
  // exponent from 127 to 15; a carry out of the mantissa raises the exponent, as it should.
  const std::uint32_t r = ax + 0xFFFu + ((ax >> 13) & 1u) - (std::uint32_t{127 - 15} << 23);
  return sign | static_cast<unsigned short>(r >> 13);
}

inline float f16_value(unsigned short h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return bits_float(sign | 0x7F800000u | (m << 13));  // infinity or NaN
  if (e == 0) {                                                       // zero or subnormal: m 2^-24, exact
    const float v = static_cast<float>(m) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((e + 127 - 15) << 23) | (m << 13));
}

}  // namespace tj_emu

inline float __bfloat162float(__nv_bfloat16 h) { return tj_emu::bits_float(static_cast<std::uint32_t>(h.__x) << 16); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{tj_emu::bf16_bits(f)}; }
inline float __half2float(__half h) { return tj_emu::f16_value(h.__x); }
inline __half __float2half_rn(float f) { return __half{tj_emu::f16_bits(f)}; }
