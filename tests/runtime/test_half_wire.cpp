// The 16-bit wire format of gradient compression (runtime/dist/half_wire.h) against the rounding
// every side defines in dsl/half_float.h: each 16-bit pattern widens to its value; floats round
// to nearest, ties to even (a sweep over every 65537th f32 bit pattern, and the edges); a sum of
// two 16-bit values is the one rounding of the exact sum.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "dsl/half_float.h"
#include "runtime/dist/half_wire.h"

namespace tj = towerjit;
namespace dist = towerjit::dist;

namespace {

// Equal bits, or both NaN (a NaN's sign means nothing, and half_value drops it).
bool same(uint16_t a, uint16_t b, tj::DType t) {
  return a == b || (std::isnan(tj::half_value(a, t)) && std::isnan(tj::half_value(b, t)));
}

}  // namespace

TEST_CASE("the wire format widens and rounds as dsl/half_float.h defines", "[runtime][half]") {
  for (const tj::DType t : {tj::DType::bf16, tj::DType::f16}) {
    INFO(tj::dtype_name(t));
    int wrong = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      const double want = tj::half_value(static_cast<uint16_t>(h), t);
      const float got = dist::from_wire(static_cast<uint16_t>(h), t);
      if (std::isnan(want) ? !std::isnan(got) : got != want || std::signbit(got) != std::signbit(want)) ++wrong;
      if (!std::isnan(want) && dist::to_wire(got, t) != h) ++wrong;  // exact values round to themselves
    }
    CHECK(wrong == 0);
    const float edges[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f,
                           0x1p-14f, 0x1.ffcp-15f, 3.3895314e38f, 3.4028235e38f, 0x1p-133f, 0x1.01p-126f, 1.00390625f,
                           1.01171875f, INFINITY, -INFINITY, NAN, -NAN};
    for (const float f : edges) {
      INFO("f = " << f);
      CHECK(same(dist::to_wire(f, t), tj::half_bits(f, t), t));
    }
    for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65537) {
      float f;
      const auto bits = static_cast<uint32_t>(u);
      std::memcpy(&f, &bits, 4);
      if (!same(dist::to_wire(f, t), tj::half_bits(f, t), t)) ++wrong;
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("a sum on the wire is the one rounding of the exact sum", "[runtime][half]") {
  std::mt19937 rng(11);
  for (const tj::DType t : {tj::DType::bf16, tj::DType::f16}) {
    INFO(tj::dtype_name(t));
    int wrong = 0;
    for (int i = 0; i < 200000; ++i) {
      const auto a = static_cast<uint16_t>(rng()), b = static_cast<uint16_t>(rng() % 8 ? (a ^ (rng() & 0x0FFF)) : rng());
      // Two 16-bit numbers differ in exponent by at most 2^8 for bf16: long double (64 bits)
      // holds the sum exactly unless the smaller is far below the larger's last bit, where
      // the rounding is the larger's.
      const long double exact = static_cast<long double>(tj::half_value(a, t)) + tj::half_value(b, t);
      if (!same(dist::add_on_wire(a, b, t), tj::half_bits(static_cast<double>(exact), t), t)) ++wrong;
    }
    CHECK(wrong == 0);
  }
}
