// The attributes that compile a function for a vector level whatever the build's target. The
// hand-written kernels (direct convolutions, 2x2 pools) are compiled for AVX2 + FMA and AVX-512
// this way and called only where cpujit::isa_allows the level (jit/cpu/cpu_isa.h: the CPU has
// it and TOWERJIT_CPU_ISA does not cap it).
#pragma once

#include "jit/cpu/cpu_isa.h"

#define TOWERJIT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TOWERJIT_TARGET_AVX512 __attribute__((target("avx512f")))
