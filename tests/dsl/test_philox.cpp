// Philox 4x32-10 against Random123's published known-answer vectors, and the element mapping
// every backend must reproduce.
#include <catch2/catch.hpp>
#include <cstdint>
#include <set>

#include "dsl/philox.h"

using namespace towerjit;

TEST_CASE("philox4x32_10 matches Random123's known-answer vectors", "[dsl]") {
  // Random123 kat_vectors: "philox4x32 10" lines (counter, key, expected).
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
        PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                      {0xffffffff, 0xffffffff}) ==
        PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                      {0xa4093822, 0x299f31d0}) ==
        PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("philox_bits takes word index % 4 of block index / 4", "[dsl]") {
  const uint64_t seed = 0x0123456789abcdefull, stream = 0xfedcba9876543210ull;
  for (uint64_t index : {0ull, 1ull, 2ull, 3ull, 4ull, 7ull, 0x1234567890ull}) {
    const uint64_t block = index / 4;
    const PhiloxCounter ctr = {uint32_t(block), uint32_t(block >> 32), uint32_t(stream),
                               uint32_t(stream >> 32)};
    const PhiloxKey key = {uint32_t(seed), uint32_t(seed >> 32)};
    INFO("index " << index);
    CHECK(philox_bits(seed, stream, index) == philox4x32_10(ctr, key)[index % 4]);
  }
}

TEST_CASE("philox_uniform lies in 0..1 and uses the top 24 bits", "[dsl]") {
  double sum = 0, lo = 1, hi = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = philox_uniform(7, 3, i);
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    REQUIRE(u == double(philox_bits(7, 3, i) >> 8) / 16777216.0);
    sum += u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  CHECK(sum / n == Approx(0.5).margin(0.005));
  CHECK(lo < 0.001);
  CHECK(hi > 0.999);
}

TEST_CASE("philox is deterministic and streams and seeds are independent", "[dsl]") {
  int same_stream = 0, same_seed = 0;
  std::set<uint32_t> seen;
  for (uint64_t i = 0; i < 1000; ++i) {
    REQUIRE(philox_bits(42, 1, i) == philox_bits(42, 1, i));
    same_stream += philox_bits(42, 1, i) == philox_bits(42, 2, i);
    same_seed += philox_bits(42, 1, i) == philox_bits(43, 1, i);
    seen.insert(philox_bits(42, 1, i));
  }
  CHECK(same_stream == 0);
  CHECK(same_seed == 0);
  CHECK(seen.size() == 1000);
  // The high words of the stream and of the index matter too.
  CHECK(philox_bits(42, 1, 5) != philox_bits(42, 1 + (1ull << 32), 5));
  CHECK(philox_bits(42, 1, 5) != philox_bits(42, 1, 5 + (4ull << 32)));
}
