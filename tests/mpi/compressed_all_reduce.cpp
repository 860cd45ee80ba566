// The 16-bit all-reduce (Transport::start_all_reduce_sum on uint16_t, for gradient compression),
// run under mpirun by tests/mpi/mpi_cli.sh (case gradient_compression_across_processes) as
//   towerjit_mpi_compressed_all_reduce
// For bf16 and f16, every rank contributes values chosen to hit each rounding case (ties, values
// that overflow when added, subnormals, signed zeros, NaN, infinities) and checks the result:
// with 2 ranks exactly the rounding of the two contributions' sum; with more, the rounding of
// some order of pairwise rounded sums (the pinned algorithm's); and on every rank the same bits.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "dsl/half_float.h"
#include "runtime/dist/half_wire.h"
#include "runtime/dist/world.h"

namespace tj = towerjit;
using tj::dist::add_on_wire;
using tj::dist::to_wire;

namespace {

// Rank r's element k: a mix of magnitudes, signs and special values, different on every rank.
float contribution(int rank, int k) {
  const float specials[] = {0.0f, -0.0f, 1.0f, 1.0f + 0x1p-8f, 65504.0f, 3e38f, 0x1p-20f, 0x1p-26f,
                            std::numeric_limits<float>::infinity(), 1.5f};
  if (k < 10) return rank % 2 ? -specials[k] * (k == 3 ? -1.0f : 1.0f) : specials[k];
  if (k == 10) return rank == 0 ? std::numeric_limits<float>::quiet_NaN() : 2.0f;
  const double x = std::sin(1.0 + k * 0.7 + rank * 1.3) * std::ldexp(1.0, (k * 7 + rank * 3) % 40 - 20);
  return static_cast<float>(x);
}

bool same(uint16_t a, uint16_t b, tj::DType format) {
  return a == b || (std::isnan(tj::dist::from_wire(a, format)) && std::isnan(tj::dist::from_wire(b, format)));
}

}  // namespace

int main() {
  tj::dist::Transport& world = tj::dist::world();
  const int rank = world.rank(), size = world.size();
  constexpr int kCount = 4001;  // odd, and more than one MPI segment of a ring's chunk
  int failures = 0;
  for (const tj::DType format : {tj::DType::bf16, tj::DType::f16}) {
    auto data = std::make_shared<std::vector<uint16_t>>(kCount);
    for (int k = 0; k < kCount; ++k) (*data)[k] = to_wire(contribution(rank, k), format);
    world.wait(world.start_all_reduce_sum(data->data(), kCount, format, data));
    for (int k = 0; k < kCount; ++k) {
      std::vector<uint16_t> parts;
      for (int r = 0; r < size; ++r) parts.push_back(to_wire(contribution(r, k), format));
      // Any order of pairwise rounded sums the algorithm might take (2 ranks: the one sum).
      bool matched = false;
      std::vector<int> order(size);
      for (int r = 0; r < size; ++r) order[r] = r;
      do {
        uint16_t s = parts[order[0]];
        for (int r = 1; r < size; ++r) s = add_on_wire(s, parts[order[r]], format);
        matched = matched || same(s, (*data)[k], format);
      } while (!matched && std::next_permutation(order.begin(), order.end()));
      // The oracle of the one rounding: half_bits of the exact sum (dsl/half_float.h).
      if (size == 2) {
        const double exact = static_cast<double>(tj::dist::from_wire(parts[0], format)) + tj::dist::from_wire(parts[1], format);
        matched = matched && same(tj::half_bits(exact, format), (*data)[k], format);
      }
      if (!matched && failures++ < 5)
        std::printf("rank %d: FAIL: %s element %d is %#06x, not a rounded sum of the ranks' values\n", rank,
                    std::string(tj::dtype_name(format)).c_str(), k, (*data)[k]);
    }
    // Every rank holds the same bits.
    std::vector<uint16_t> all(static_cast<size_t>(size) * kCount);
    world.all_gather(data->data(), kCount * sizeof(uint16_t), all.data());
    if (std::memcmp(all.data(), all.data() + static_cast<size_t>(rank) * kCount, kCount * sizeof(uint16_t)) != 0 &&
        failures++ < 5)
      std::printf("rank %d: FAIL: its %s result differs from rank 0's\n", rank, std::string(tj::dtype_name(format)).c_str());
  }
  if (failures == 0) std::printf("rank %d: ok\n", rank);
  return failures == 0 ? 0 : 1;
}
