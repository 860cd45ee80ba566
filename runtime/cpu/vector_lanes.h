// The first `count` lanes of a vector, for the hand-written kernels' loads and stores at the end
// of a row (count clamped to the vector's width: 0 or less is none, the width or more is all).
// Compiled for their level whatever the build's target (runtime/cpu/cpu_features.h).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

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

// The first `count` (0-8) bytes at p as the low bytes of an integer, and back: loads and stores
// of 4, 2 and 1 bytes, nothing touched past the first `count`, no trip through memory (a
// vector loaded from a buffer just written byte by byte waits for the stores to retire).
inline uint64_t load_bytes_upto8(const uint8_t* p, int64_t count) {
  if (count <= 0) return 0;
  if (count >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  uint64_t v = 0;
  int at = 0;
  if (count & 4) {
    uint32_t t;
    std::memcpy(&t, p, 4);
    v = t, at = 4;
  }
  if (count & 2) {
    uint16_t t;
    std::memcpy(&t, p + at, 2);
    v |= uint64_t{t} << (8 * at), at += 2;
  }
  if (count & 1) v |= uint64_t{p[at]} << (8 * at);
  return v;
}
inline void store_bytes_upto8(uint8_t* p, int64_t count, uint64_t v) {
  if (count <= 0) return;
  if (count >= 8) {
    std::memcpy(p, &v, 8);
    return;
  }
  int at = 0;
  if (count & 4) {
    const uint32_t t = static_cast<uint32_t>(v);
    std::memcpy(p, &t, 4);
    at = 4;
  }
  if (count & 2) {
    const uint16_t t = static_cast<uint16_t>(v >> (8 * at));
    std::memcpy(p + at, &t, 2);
    at += 2;
  }
  if (count & 1) p[at] = static_cast<uint8_t>(v >> (8 * at));
}

// The first `count` bytes at p as i32 lanes (zero past them), and i32 lanes (each 0-255) stored
// as bytes: the pools' codes (runtime/cpu/pool.h).
TOWERJIT_TARGET_AVX2 inline __m256i load_bytes8(const uint8_t* p, int64_t count) {
  return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(load_bytes_upto8(p, count))));
}
TOWERJIT_TARGET_AVX2 inline void store_bytes8(uint8_t* p, int64_t count, __m256i v) {
  const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  store_bytes_upto8(p, count, static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_packus_epi16(words, words))));
}
TOWERJIT_TARGET_AVX512 inline __m512i load_bytes16(const uint8_t* p, int64_t count) {
  // (The maskz forms with every lane set: the plain ones draw a false "uninitialised" warning
  // from g++ 12.)
  if (count >= 16) return _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const uint64_t low = load_bytes_upto8(p, count), high = count > 8 ? load_bytes_upto8(p + 8, count - 8) : 0;
  return _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_set_epi64x(static_cast<int64_t>(high), static_cast<int64_t>(low)));
}
TOWERJIT_TARGET_AVX512 inline void store_bytes16(uint8_t* p, int64_t count, __m512i v) {
  const __m128i bytes = _mm512_maskz_cvtepi32_epi8(0xFFFF, v);
  if (count >= 16) return _mm_storeu_si128(reinterpret_cast<__m128i*>(p), bytes);
  store_bytes_upto8(p, count, static_cast<uint64_t>(_mm_cvtsi128_si64(bytes)));
  if (count > 8) store_bytes_upto8(p + 8, count - 8, static_cast<uint64_t>(_mm_extract_epi64(bytes, 1)));
}

}  // namespace towerjit::cpujit
