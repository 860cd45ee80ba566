// The first `count` lanes of a vector, for the hand-written kernels' loads and stores at the end
// of a row (count clamped to the vector's width: 0 or less is none, the width or more is all).
// Compiled for their level whatever the build's target (runtime/cpu/cpu_features.h).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "runtime/cpu/cpu_features.h"

namespace towerjit::cpujit {

TOWERJIT_TARGET_AVX2 inline __m256i first_lanes8(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(count, 0, 8))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
TOWERJIT_TARGET_AVX2 inline __m256 maskload8(const float* p, int64_t count) {
  return _mm256_maskload_ps(p, first_lanes8(count));
}
TOWERJIT_TARGET_AVX2 inline void maskstore8(float* p, int64_t count, __m256 v) {
  _mm256_maskstore_ps(p, first_lanes8(count), v);
}

TOWERJIT_TARGET_AVX512 inline __mmask16 first_lanes16(int64_t count) {
  return static_cast<__mmask16>((1u << std::clamp<int64_t>(count, 0, 16)) - 1);
}
TOWERJIT_TARGET_AVX512 inline __m512 maskload16(const float* p, int64_t count) {
  return _mm512_maskz_loadu_ps(first_lanes16(count), p);
}
TOWERJIT_TARGET_AVX512 inline void maskstore16(float* p, int64_t count, __m512 v) {
  _mm512_mask_storeu_ps(p, first_lanes16(count), v);
}
TOWERJIT_TARGET_AVX512 inline __m512 broadcast16(const float* p) { return _mm512_set1_ps(*p); }

}  // namespace towerjit::cpujit
