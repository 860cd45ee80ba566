#include "runtime/cpu/half_spans.h"

#include <immintrin.h>

#include <bit>
#include <vector>

#include "dsl/half_float.h"
#include "jit/cpu/cpu_isa.h"

namespace towerjit::cpujit {
namespace {

// Every f16 bit pattern's value as a float: widening by table is as fast as F16C's scalar
// conversion and needs no CPU feature.
const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(0x10000);
    for (uint32_t b = 0; b < 0x10000; ++b) t[b] = static_cast<float>(half_value(static_cast<uint16_t>(b), DType::f16));
    return t;
  }();
  return table.data();
}

// `v` rounded to bf16's bits, to nearest even. bf16 keeps f32's exponent, so rounding is on the
// bits: add 0x7fff plus the kept part's lowest bit, then drop the low half (a carry into the
// exponent is the correct rounding up, to infinity past the largest finite value); a NaN
// becomes the quiet NaN of its sign, as half_bits gives.
inline uint16_t narrow_bf16(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7fc0u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// f16 through F16C, 8 at a time. vcvtph2ps is exact (f16 subnormals become normal floats;
// MXCSR's DAZ does not apply to its 16-bit inputs). vcvtps2ph rounds to nearest even, overflows
// to infinity and keeps f16 subnormals (FTZ does not apply to it; an f32 subnormal, flushed by
// DAZ, would round to a signed zero anyway); a NaN keeps the top of its payload, so NaN lanes
// are set to the quiet NaN of their sign that half_bits gives. F16C is part of the avx2 level
// (x86-64-v3), so TOWERJIT_CPU_ISA=baseline runs the scalar conversions an SSE2-only machine
// would. (The level is read from the environment each call: convert whole runs at a time.)
bool has_f16c() { return isa_allows(CpuIsa::avx2); }

__attribute__((target("avx2,f16c"))) void widen_f16c(const uint16_t* from, float* to, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(to + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i))));
  for (; i < n; ++i) to[i] = widen_half(from[i], DType::f16);
}

__attribute__((target("avx2,f16c"))) void narrow_f16c(const float* from, uint16_t* to, int64_t n) {
  const __m128i quiet = _mm_set1_epi16(0x7e00), sign = _mm_set1_epi16(static_cast<int16_t>(0x8000));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(from + i);
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // The NaN lanes (unordered with themselves) as 16-bit masks: the 32-bit compare packed.
    const __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m128i nan = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
    const __m128i canonical = _mm_or_si128(_mm_and_si128(h, sign), quiet);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i), _mm_blendv_epi8(h, canonical, nan));
  }
  for (; i < n; ++i) to[i] = half_bits(from[i], DType::f16);
}

}  // namespace

float widen_half(uint16_t bits, DType dtype) {
  if (dtype == DType::f16) return f16_table()[bits];
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// The dtype chosen outside the loops, so bf16's (a shift; the rounding above) vectorise: a call
// per element had cost more than the convolution (cnn's first layer 0.28 ms in f32, 1.46 in bf16).
void widen_span(const uint16_t* from, float* to, int64_t n, DType dtype) {
  if (dtype == DType::bf16)
    for (int64_t i = 0; i < n; ++i) to[i] = std::bit_cast<float>(static_cast<uint32_t>(from[i]) << 16);
  else if (has_f16c())
    widen_f16c(from, to, n);
  else
    for (int64_t i = 0; i < n; ++i) to[i] = widen_half(from[i], dtype);
}

void narrow_span(const float* from, uint16_t* to, int64_t n, DType dtype) {
  if (dtype == DType::bf16)
    for (int64_t i = 0; i < n; ++i) to[i] = narrow_bf16(from[i]);
  else if (has_f16c())
    narrow_f16c(from, to, n);
  else
    for (int64_t i = 0; i < n; ++i) to[i] = half_bits(from[i], dtype);
}

}  // namespace towerjit::cpujit
