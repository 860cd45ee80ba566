// Which x86 vector level towerjit's CPU code uses: the widest this CPU has, capped by
// TOWERJIT_CPU_ISA (jit/knobs.h). One answer for every CPU path chosen by features — the LLVM
// target of the JIT'd kernels (llvm_codegen.cpp), the direct convolutions and 2x2 pools
// (runtime/cpu/), the OpenBLAS core type (runtime/cpu/blas.cpp) — so a machine with AVX-512
// can run, and test, the AVX2 and baseline paths too.
#pragma once

#include <string>

#include "jit/knobs.h"

namespace towerjit::cpujit {

using knobs::CpuIsa;

// "amx", "avx512bf16", "avx512", "avx2", "baseline": the knob's spelling.
const char* isa_name(CpuIsa isa);

// The widest level this CPU runs: AMX-BF16 tiles the kernel supports, with AVX-512 F, BW and
// AVX512_BF16; else AVX-512 F and BW with AVX512_BF16, else AVX-512 F and BW, else AVX2
// and FMA, else the baseline.
CpuIsa widest_isa();

// This CPU's model name and its vector features, for messages ("AMD EPYC: sse2 sse3 ... avx2 fma").
std::string cpu_description();

// The level to use: TOWERJIT_CPU_ISA, or the widest this CPU has. Asking for a level above
// `widest_isa()` is a towerjit::Error naming the CPU's features and the levels it has.
CpuIsa cpu_isa();

// The check cpu_isa() makes, for any CPU (tests ask for levels this machine lacks).
CpuIsa checked_isa(CpuIsa requested, CpuIsa widest, const std::string& cpu);

// The OpenBLAS core type (OPENBLAS_CORETYPE) of a level: SkylakeX, Haswell, and for the
// baseline Prescott's SSE3 kernels, OpenBLAS's own fallback for CPUs it does not know.
const char* openblas_core(CpuIsa level);

// The level of the vector code generated for `level`: avx512bf16 and amx add only the bf16
// products of runtime/cpu/gemm_half.cpp and amx_gemm.cpp, so the JIT'd kernels and the direct
// convolutions of both are avx512's.
constexpr CpuIsa vector_level(CpuIsa level) { return level >= CpuIsa::avx512bf16 ? CpuIsa::avx512 : level; }

// Whether towerjit's CPU code may use `level`.
inline bool isa_allows(CpuIsa level) { return cpu_isa() >= level; }

}  // namespace towerjit::cpujit
