// The worst-case bound of float32 sums for the product tests (test_small_gemm.cpp,
// test_bf16_gemm.cpp): deterministic, unlike the reference's probabilistic one beyond 100 terms
// (jit/reference/eval.h, rounding_gamma).
#pragma once

#include <cstdint>

namespace towerjit::testing {

constexpr double kF32UnitRoundoff = 0x1p-24;

// Higham's gamma_n = n u / (1 - n u): the bound on the relative error of n roundings.
inline double f32_gamma(int64_t n) { return n * kF32UnitRoundoff / (1.0 - n * kF32UnitRoundoff); }

}  // namespace towerjit::testing
