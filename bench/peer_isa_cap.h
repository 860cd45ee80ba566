// The peers held to towerjit's vector level. TOWERJIT_CPU_ISA caps towerjit's own code below
// what the CPU has (jit/cpu/cpu_isa.h), so an AVX-512 machine can run the AVX2 paths; the peers
// would still run their widest kernels and the ratio would compare two levels. Each peer's
// libraries have a cap of their own, set in the environment of its runs:
//   PyTorch's vectorised kernels and Inductor's generated C++  ATEN_CPU_CAPABILITY
//   oneMKL (PyPI's torch, matrix products)                     MKL_ENABLE_INSTRUCTIONS
//   oneDNN (convolutions, bf16 products)                       ONEDNN_MAX_CPU_ISA
//   XLA's CPU compiler (JAX)                                   XLA_FLAGS=--xla_cpu_max_isa
// and Inductor a compile cache of the level's own (TORCHINDUCTOR_CACHE_DIR), as its cache
// would load kernels compiled at another level.
// The caps are each library's own documented ceiling; what a library does below it is its
// choice. The baseline level is SSE2 for towerjit and SSE4.2 for the peers (the lowest MKL and
// XLA accept), so there the peers keep a small edge. XLA's cap holds the code it generates but
// not its matrix products: jax.jit of a 1024^3 product ran at 150-165 GFLOP/s on one Sapphire
// Rapids core under --xla_cpu_max_isa=AVX2 and =SSE4_2 alike (with XNNPACK and its fusions off
// too), beyond the 112 that 256-bit FMAs allow there (2 x 8 x 2 flops a cycle at 3.5 GHz). So
// JAX's figure under a cap is that of a JAX with wider products: a ratio against it
// understates towerjit's.
#pragma once

#include <string>

#include "jit/cpu/cpu_isa.h"

namespace towerjit::bench {

// env(1) arguments capping the peers at `level`: empty when `level` is the CPU's `widest`
// (nothing is capped). `user_xla_flags` (XLA_FLAGS as the user set it, or null) is kept
// ahead of the cap.
std::string peer_isa_cap(cpujit::CpuIsa level, cpujit::CpuIsa widest, const char* user_xla_flags);

// Why `peer`'s figure is not one at `level`, or empty when it is (or nothing is capped):
// JAX's products are not held (above); a PyTorch peer is held when ATen reported
// `reported_capability` as the level's ("AVX2").
std::string peer_not_held(const std::string& peer, const std::string& reported_capability, cpujit::CpuIsa level,
                          cpujit::CpuIsa widest);

}  // namespace towerjit::bench
