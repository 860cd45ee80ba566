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

// x[j] = vector_exp(x[j]) for j < n, n a multiple of 8: the same steps on 8 lanes at a time in
// GCC's vector types. GCC leaves a loop of vector_exp scalar where its clamps become branches
// (attention's rows ran so at 1 to 2 ns an element); written for 8 lanes, each step is one
// vector instruction at AVX2, or two SSE ones at the build's baseline.
inline __attribute__((always_inline)) void vector_exp_in_place(float* x, int64_t n) {
  namespace c = exp_constants;
  using Floats = float __attribute__((vector_size(32), aligned(4), may_alias));
  using Ints = int32_t __attribute__((vector_size(32), aligned(4), may_alias));
  constexpr Floats kLowest = {c::kLowest, c::kLowest, c::kLowest, c::kLowest,
                              c::kLowest, c::kLowest, c::kLowest, c::kLowest};
  constexpr Floats kHighest = {c::kHighest, c::kHighest, c::kHighest, c::kHighest,
                               c::kHighest, c::kHighest, c::kHighest, c::kHighest};
  constexpr Floats kMagic = {c::kRoundMagic, c::kRoundMagic, c::kRoundMagic, c::kRoundMagic,
                             c::kRoundMagic, c::kRoundMagic, c::kRoundMagic, c::kRoundMagic};
  for (int64_t j = 0; j < n; j += 8) {
    Floats& slot = *reinterpret_cast<Floats*>(x + j);
    const Floats v = slot;
    Floats xc = v < kLowest ? kLowest : v;  // a NaN stays, and is put back last
    xc = xc > kHighest ? kHighest : xc;
    const Floats t = xc * c::kLog2E + kMagic;
    const Floats nf = t - kMagic;
    const Ints ni = reinterpret_cast<const Ints&>(t) - c::kRoundMagicBits;
    const Floats r1 = nf * -c::kLn2Head + xc;
    const Floats r = nf * -c::kLn2Tail + r1;
    Floats q = Floats{} + c::kPoly[0];
    for (int i = 1; i < 6; ++i) q = q * r + c::kPoly[i];
    const Floats p = (q * (r * r) + r) + 1.0f;
    const Ints n1 = ni >> 1, n2 = ni - n1;
    const Ints e1 = (n1 + 127) << 23, e2 = (n2 + 127) << 23;
    const Floats y = p * reinterpret_cast<const Floats&>(e1) * reinterpret_cast<const Floats&>(e2);
    slot = v != v ? v : y;
  }
}

}  // namespace towerjit::cpujit
