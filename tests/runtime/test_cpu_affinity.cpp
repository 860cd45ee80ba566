// CPU towers' cores: how they are shared out, pinned pool workers, the caller's thread given
// back its cores after a step.
#include <catch2/catch.hpp>
#include <mutex>

#include "runtime/cpu_affinity.h"
#include "runtime/thread_pool.h"
#include "runtime/towers/trainer_internals.h"
#include "tower_test_model.h"
#include "towerjit.h"

namespace tj = towerjit;
using Cores = std::vector<std::vector<int>>;

TEST_CASE("CPU towers get disjoint groups of cores, or share them evenly when more", "[towers][runtime]") {
  CHECK(tj::tower_cores(2, {0, 1, 2, 3}) == Cores{{0, 1}, {2, 3}});
  CHECK(tj::tower_cores(3, {0, 1, 2, 3}) == Cores{{0}, {1}, {2, 3}});
  CHECK(tj::tower_cores(1, {4, 5, 6}) == Cores{{4, 5, 6}});
  CHECK(tj::tower_cores(2, {3, 7}) == Cores{{3}, {7}});
  CHECK(tj::tower_cores(5, {0, 1}) == Cores{{0}, {1}, {0}, {1}, {0}});
  CHECK(tj::tower_cores(0, {0, 1}).empty());
}

TEST_CASE("pool workers run on the cores they are pinned to, and a scoped pin is given back", "[towers][runtime]") {
  const std::vector<int> all = tj::allowed_cores();
  REQUIRE(!all.empty());
  CHECK(tj::current_thread_cores() == all);
  const int last = all.back();
  tj::ThreadPool pool(3, Cores{{}, {all.front()}, {last}});
  std::mutex m;
  Cores seen(3);
  pool.parallel_for(3, [&](int64_t begin, int64_t) {
    std::lock_guard lock(m);
    seen[begin] = tj::current_thread_cores();
  });
  CHECK(seen[0] == all);  // the caller's thread is left alone
  CHECK(seen[1] == std::vector<int>{all.front()});
  CHECK(seen[2] == std::vector<int>{last});
  {
    const tj::ScopedPin pin({last});
    CHECK(tj::current_thread_cores() == std::vector<int>{last});
  }
  CHECK(tj::current_thread_cores() == all);
}

TEST_CASE("a trainer pins each CPU tower to cores of its own and gives the caller's back", "[towers][runtime]") {
  const std::vector<int> all = tj::allowed_cores();
  tj::Graph g;
  const tj::Tensor loss = tj::testing::small_mlp_loss(g);
  tj::TowerTrainer trainer(g, loss, tj::Towers{tj::cpu(0), tj::cpu(1)}, tj::sgd(0.1));
  const auto expected = tj::tower_cores(2, all);
  CHECK(tj::detail::cores_of(trainer, 0) == expected[0]);
  CHECK(tj::detail::cores_of(trainer, 1) == expected[1]);
  trainer.step(tj::testing::batch_of(9, 1));
  CHECK(tj::current_thread_cores() == all);  // tower 0 ran on this thread, pinned meanwhile
  CHECK(trainer.applies() == 1);
}
