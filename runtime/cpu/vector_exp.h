// towerjit's float exp in C++, for the hand-written CPU routines (attention's softmax): straight
// code without calls or branches, so a loop of it vectorises where libm's expf kept it scalar.
// The same steps and constants as the kernels' exp (jit/cpu/ir_math.cpp, exp_constants.h), and
// within the same bound: under 1.5 units of 2^-24·|y| (tests/jit/test_ir_math.cpp).
#pragma once

#include <bit>
#include <cstdint>

#include "jit/cpu/exp_constants.h"

namespace towerjit::cpujit {

inline __attribute__((always_inline)) float vector_exp(float x) {
  namespace c = exp_constants;
  float xc = x < c::kLowest ? c::kLowest : x;  // a NaN stays, and is put back last
  xc = xc > c::kHighest ? c::kHighest : xc;
  const float t = xc * c::kLog2E + c::kRoundMagic;
  const float n = t - c::kRoundMagic;
  const int32_t ni = std::bit_cast<int32_t>(t) - c::kRoundMagicBits;
  const float r1 = n * -c::kLn2Head + xc;
  const float r = n * -c::kLn2Tail + r1;
  float q = c::kPoly[0];
  for (int i = 1; i < 6; ++i) q = q * r + c::kPoly[i];
  const float p = (q * (r * r) + r) + 1.0f;
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  const float y = p * std::bit_cast<float>((n1 + 127) << 23) * std::bit_cast<float>((n2 + 127) << 23);
  return x != x ? x : y;
}

}  // namespace towerjit::cpujit
