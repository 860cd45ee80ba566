// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
// counter-based generator behind every random number in towerjit. A number is a pure function
// of (seed, stream, index), so CPU and GPU, and any tower count, draw the same values.
#pragma once

#include <array>
#include <cstdint>

namespace towerjit {

// The rounds' multipliers, and the key schedule's Weyl increments (the golden ratio and
// sqrt(3) - 1, in 32 bits): here for the backends that write the rounds out themselves.
inline constexpr uint32_t kPhiloxMul0 = 0xD2511F53u, kPhiloxMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxWeyl0 = 0x9E3779B9u, kPhiloxWeyl1 = 0xBB67AE85u;

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Ten rounds of Philox 4x32 on one counter block.
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// 32 random bits for element `index` of `stream`: word index % 4 of the block with
// counter {lo(index / 4), hi(index / 4), lo(stream), hi(stream)} and key {lo(seed), hi(seed)}.
uint32_t philox_bits(uint64_t seed, uint64_t stream, uint64_t index);

// A float in [0, 1) from the top 24 bits: exact in f32, the same on every backend.
double philox_uniform(uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace towerjit
