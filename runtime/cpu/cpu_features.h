// What this CPU's vector units can run, asked once, and the attributes that compile a function
// for them whatever the build's target. The hand-written kernels (direct convolutions, 2x2
// pools) are compiled for AVX2 + FMA and AVX-512 this way and called only where the CPU has them.
#pragma once

#define TOWERJIT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TOWERJIT_TARGET_AVX512 __attribute__((target("avx512f")))

namespace towerjit::cpujit {

// AVX2 and FMA.
inline bool has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

// AVX-512 F (with AVX2 and FMA).
inline bool has_avx512f() {
  static const bool has = has_avx2_fma() && __builtin_cpu_supports("avx512f");
  return has;
}

}  // namespace towerjit::cpujit
