// The emulated GPU's bf16 and f16 (emulator/kernel/cuda_host_half.h, compiled into every
// emulated kernel) against dsl/half_float.h, which the reference, the runtime and the CPU JIT
// use: every one of the 65536 bit patterns of each format widens to the same value, and f32
// numbers round to the same bits (each rounding case, every f32 exponent, random patterns).
// A NaN stays a NaN of its sign; its payload is the backend's own.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <random>

#include "dsl/half_float.h"
#include "emulator/kernel/cuda_host_half.h"

namespace tj = towerjit;

namespace {

uint16_t emulated_bits(float f, tj::DType t) {
  return t == tj::DType::bf16 ? __float2bfloat16_rn(f).__x : __float2half_rn(f).__x;
}
float emulated_value(uint16_t h, tj::DType t) {
  return t == tj::DType::bf16 ? __bfloat162float(__nv_bfloat16{h}) : __half2float(__half{h});
}

void check_rounding(float f, tj::DType t) {
  const uint16_t got = emulated_bits(f, t), want = tj::half_bits(f, t);
  INFO(tj::dtype_name(t) << " of " << f << " (0x" << std::hex << std::bit_cast<uint32_t>(f) << "): got 0x" << got
                         << ", want 0x" << want);
  if (std::isnan(f)) {
    CHECK(std::isnan(tj::half_value(got, t)));
    CHECK((got & 0x8000) == (want & 0x8000));
  } else {
    CHECK(got == want);
  }
}

}  // namespace

TEST_CASE("emulated GPU: bf16 and f16 widen every bit pattern as half_float.h", "[emulator][half]") {
  for (tj::DType t : {tj::DType::bf16, tj::DType::f16})
    for (uint32_t h = 0; h < 65536; ++h) {
      const double want = tj::half_value(static_cast<uint16_t>(h), t);
      const float got = emulated_value(static_cast<uint16_t>(h), t);
      if (std::isnan(want)) {
        if (!std::isnan(got)) FAIL(tj::dtype_name(t) << " 0x" << std::hex << h << " is not NaN");
      } else if (std::bit_cast<uint64_t>(static_cast<double>(got)) != std::bit_cast<uint64_t>(want)) {
        FAIL(tj::dtype_name(t) << " 0x" << std::hex << h << ": " << got << ", want " << want);
      }
      // And back: every pattern of a number rounds to itself.
      if (!std::isnan(want) && emulated_bits(got, t) != h) FAIL(tj::dtype_name(t) << " 0x" << std::hex << h << " round trip");
    }
}

TEST_CASE("emulated GPU: f32 rounds to bf16 and f16 as half_float.h", "[emulator][half]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float cases[] = {1.0f, -2.0f, 0.0f, -0.0f, 0.1f, inf, -inf, std::nanf(""), -std::nanf(""),
                         1 + 0x1p-8f, 1 + 3 * 0x1p-8f, 1 + 0x1p-8f + 0x1p-20f, 1 + 0x1p-11f, 1 + 3 * 0x1p-11f,
                         65504.0f, 65519.0f, 65519.996f, 65520.0f, 1e6f, std::bit_cast<float>(0x7F7FFFFFu),
                         std::bit_cast<float>(0x7F7F7FFFu), std::bit_cast<float>(0x7F7F8000u), 0x1p-24f, 0x1p-25f,
                         3 * 0x1p-25f, 0x1p-14f, 0x1p-20f, 0x1.FFCp-15f, 0x1.FFEp-15f, 0x1p-126f, 0x1p-133f,
                         3 * 0x1p-134f, std::bit_cast<float>(1u), std::bit_cast<float>(0x7F800001u)};
  std::mt19937 rng(25);
  for (tj::DType t : {tj::DType::bf16, tj::DType::f16}) {
    for (float f : cases) check_rounding(f, t), check_rounding(-f, t);
    // Each f32 exponent: its smallest number, a tie and a random significand.
    for (uint32_t e = 0; e < 256; ++e)
      for (uint32_t m : {0u, 0x8000u, 0x1000u, 0x1800u, static_cast<uint32_t>(rng() & 0x7FFFFFu)})
        check_rounding(std::bit_cast<float>(e << 23 | m), t);
    for (int i = 0; i < 200000; ++i) {
      const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
      if (emulated_bits(f, t) != tj::half_bits(f, t) && !std::isnan(f)) check_rounding(f, t);
    }
  }
}
