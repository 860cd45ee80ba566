// TF32 as the tensor cores see it, for the emulator's cuBLASLt and cuDNN: each f32 operand is
// rounded to TF32 (10 stored mantissa bits) before the products, which are then summed in f32.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace towerjit::emulator {

// Round to nearest TF32, ties away from zero (cvt.rna.tf32.f32): add half of the 13 dropped
// bits' weight, then drop them. A carry into the exponent is the correct rounding up (to
// infinity past the largest finite float); infinities and NaNs pass unchanged.
inline float round_to_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// A copy of `count` contiguous floats, each rounded to TF32.
inline std::vector<float> tf32_copy(const float* p, std::size_t count) {
  std::vector<float> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = round_to_tf32(p[i]);
  return out;
}

}  // namespace towerjit::emulator
