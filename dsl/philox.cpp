// Philox 4x32-10 exactly as Random123's philox4x32_R(10, ...): the known-answer vectors of
// Random123's kat_vectors pass (tests/dsl/test_philox.cpp). The backends emit the same rounds
// in CUDA C and LLVM IR (jit/cpu/llvm_emitter.cpp), so keep this file the readable definition.
#include "dsl/philox.h"

namespace towerjit {

namespace {


inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

inline PhiloxCounter round(const PhiloxCounter& c, const PhiloxKey& k) {
  uint32_t hi0, lo0, hi1, lo1;
  mulhilo(kPhiloxMul0, c[0], hi0, lo0);
  mulhilo(kPhiloxMul1, c[2], hi1, lo1);
  return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {  // the key is bumped between rounds, not before the first
      key[0] += kPhiloxWeyl0;
      key[1] += kPhiloxWeyl1;
    }
    counter = round(counter, key);
  }
  return counter;
}

uint32_t philox_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t block = index / 4;
  const PhiloxCounter ctr = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                             static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  const PhiloxKey key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  return philox4x32_10(ctr, key)[index % 4];
}

double philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  // 24 bits fill an f32 mantissa exactly: k * 2^-24 for k in [0, 2^24), never 1.
  return static_cast<double>(philox_bits(seed, stream, index) >> 8) * (1.0 / 16777216.0);
}

}  // namespace towerjit
