// DDP's buckets: gradients in the order the backward pass finishes them, cut by size.
#include <catch2/catch.hpp>

#include "runtime/towers/gradient_buckets.h"

namespace tj = towerjit;
using Buckets = std::vector<std::vector<int>>;

TEST_CASE("gradients are bucketed in the order they are ready, each bucket closing at its cap", "[towers][runtime]") {
  // Backward finishes the last layer first: tensor 3 at step 10, then 2, 1, 0.
  const std::vector<int> ready = {40, 30, 20, 10};
  const std::vector<int64_t> bytes = {400, 100, 300, 200};
  CHECK(tj::plan_buckets(ready, bytes, 1000, 1000) == Buckets{{3, 2, 1, 0}});
  CHECK(tj::plan_buckets(ready, bytes, 350, 350) == Buckets{{3, 2}, {1, 0}});
  // A smaller first bucket starts the reduction earlier.
  CHECK(tj::plan_buckets(ready, bytes, 1000, 150) == Buckets{{3}, {2, 1, 0}});
  CHECK(tj::plan_buckets(ready, bytes, 0, 0) == Buckets{{3}, {2}, {1}, {0}});
  // Ties keep index order; one tensor; none.
  CHECK(tj::plan_buckets({5, 5, 1}, {4, 4, 4}, 8, 8) == Buckets{{2, 0}, {1}});
  CHECK(tj::plan_buckets({0}, {4}, 100, 100) == Buckets{{0}});
  CHECK(tj::plan_buckets({}, {}, 100, 100).empty());
}
