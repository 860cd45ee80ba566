// The constants of towerjit's own float exp: the CPU kernels write it out in LLVM IR
// (jit/cpu/ir_math.cpp) and the hand-written CPU routines inline it in C++
// (runtime/cpu/vector_exp.h), so both give the same function. How they are derived:
// ir_math.cpp's header comment.
#pragma once

#include <cstdint>

namespace towerjit::cpujit::exp_constants {

constexpr float kLowest = -104.0f;     // below: the result is under the smallest float
constexpr float kHighest = 88.75f;     // above: overflows (to infinity by itself at this clamp)
constexpr float kLog2E = 0x1.715476p+0f;
constexpr float kLn2Head = 0x1.62e4p-1f;        // 16 bits: n·head is exact for |n| <= 255
constexpr float kLn2Tail = 0x1.7f7d1cf78p-20f;  // ln 2 - head
constexpr float kRoundMagic = 0x1.8p+23f;       // adding it rounds to an integer in the low bits
constexpr int32_t kRoundMagicBits = 0x4B400000;
// e^r = 1 + r + r²·q(r), q's Taylor coefficients from r^5 down to the constant.
constexpr float kPoly[] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f};

}  // namespace towerjit::cpujit::exp_constants
