// Runs of bf16 or f16 bit patterns widened to f32 and f32 rounded to them, vectorised: bf16 by
// its bits, f16 by F16C at the avx2 level and above (scalar below, as an SSE2-only machine
// would). For the runtime's 16-bit paths that convert whole rows (runtime/cpu/conv_images.h,
// half_conv.cpp, gemm_half.cpp); the JIT'd kernels convert in their own code.
#pragma once

#include <cstdint>

#include "dsl/dtype.h"

namespace towerjit::cpujit {

// A bf16 or f16 bit pattern's value as a float (exact): bf16 by a shift, f16 by a table of every
// pattern (as fast as F16C's scalar conversion, and no CPU feature needed).
float widen_half(uint16_t bits, DType dtype);

// n bit patterns of `dtype` (bf16 or f16) as floats (exact), and floats rounded to `dtype`
// (to nearest even; a NaN becomes the quiet NaN of its sign, as half_bits gives).
void widen_span(const uint16_t* from, float* to, int64_t n, DType dtype);
void narrow_span(const float* from, uint16_t* to, int64_t n, DType dtype);

}  // namespace towerjit::cpujit
