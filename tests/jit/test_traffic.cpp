// The bytes a loop kernel is charged with (jit/kir/traffic.h), which the dump's index and so the
// GPU cost model, and the bench's loop-kernel rates, read: buffers stored and loaded whole, once,
// but a buffer of which the kernel's points touch less charged one 32-byte sector a point.
#include <catch2/catch.hpp>

#include "epilogue_cases.h"
#include "jit/kir/traffic.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

// The program's only loop kernel whose space is `space`.
const tj::kir::Kernel& kernel_over(const tj::kir::Program& p, const tj::Shape& space) {
  const tj::kir::Kernel* found = nullptr;
  for (const tj::kir::Kernel& k : p.kernels)
    if (k.space == space) {
      REQUIRE(found == nullptr);
      found = &k;
    }
  REQUIRE(found != nullptr);
  return *found;
}

}  // namespace

TEST_CASE("traffic: whole buffers read and written once, a broadcast operand at its own size", "[jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 3, 5, 7});
  const Tensor scale = tj::input("scale", {1, 3, 1, 1});
  const tj::kir::Program p = lower(g, {tj::relu(x * scale + x)});
  const tj::kir::Kernel& k = kernel_over(p, {kBatch, 3, 5, 7});
  // x twice (one buffer), scale at every point but 12 bytes of it.
  CHECK(tj::kir::bytes_read(p, k) == tj::kir::Affine{12, 4 * 105});
  CHECK(tj::kir::bytes_written(p, k) == tj::kir::Affine{0, 4 * 105});
}

TEST_CASE("traffic: a kernel reading a few points of a large buffer is charged a sector a point", "[jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 3, 50, 70});
  // Each channel's first element plus one: 3 points of x, on a loop of its own.
  const Tensor corner = tj::slice(x, {0, 0, 0, 0}, {kBatch, 3, 1, 1}) + 1.0;
  const tj::kir::Program p = lower(g, {corner});
  const tj::kir::Kernel& k = kernel_over(p, {kBatch, 3, 1, 1});
  CHECK(tj::kir::bytes_read(p, k) == tj::kir::Affine{0, 3 * tj::kir::kSectorBytes});
  CHECK(tj::kir::bytes_written(p, k) == tj::kir::Affine{0, 3 * 4});
  // At every batch no more than the buffer: a loop over as many points as x has reads x whole.
  const tj::kir::Program whole = lower(g, {x + 1.0});
  CHECK(tj::kir::bytes_read(whole, kernel_over(whole, {kBatch, 3, 50, 70})) == tj::kir::Affine{0, 4 * 3 * 50 * 70});
}
