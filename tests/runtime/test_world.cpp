// The world of processes as one process sees it without a launcher (runtime/dist/world.h):
// detecting a launcher from the environment, the world of one, a pipeline reading only its
// part of each batch, and a trainer's own rows. Runs over several processes are tested under
// mpirun (tests/mpi/mpi_cli.sh, label mpi).
#include <catch2/catch.hpp>
#include <cstdlib>

#include "runtime/dist/world.h"
#include "runtime/towers/trainer_internals.h"
#include "tower_test_model.h"
#include "towerjit.h"

namespace tj = towerjit;

namespace {

// Sets an environment variable for a scope.
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* value) : name(n) { setenv(n, value, 1); }
  ~ScopedEnv() { unsetenv(name); }
};

}  // namespace

TEST_CASE("a process started by hand is a world of one, and knows a launcher's environment", "[runtime][mpi]") {
  REQUIRE_FALSE(std::getenv("OMPI_COMM_WORLD_SIZE"));  // ctest runs this test without mpirun
  CHECK_FALSE(tj::dist::detect_launch().launched);
  tj::dist::Transport& world = tj::dist::world();
  CHECK(world.size() == 1);
  CHECK(world.rank() == 0);
  CHECK(world.name() == "in-process");
  CHECK(tj::dist::rank_prefix().empty());
  float data[2] = {1.5f, -2};
  world.all_reduce_sum(data, 2);  // the identity
  CHECK(data[0] == 1.5f);
  CHECK(world.all_gather(std::vector<char>{'a', 'b'}) == std::vector<std::vector<char>>{{'a', 'b'}});
  tj::dist::check_agreement({{"batch", "64"}});  // nothing to disagree with
  {
    ScopedEnv size("OMPI_COMM_WORLD_SIZE", "2");
    CHECK(tj::dist::detect_launch().launched);
    CHECK(tj::dist::detect_launch().launcher == "mpirun");
    ScopedEnv off("TOWERJIT_MPI", "off");
    CHECK_FALSE(tj::dist::detect_launch().launched);
  }
  {
    ScopedEnv rank("PMIX_RANK", "0"), slurm("SLURM_PROCID", "0");
    CHECK(tj::dist::detect_launch().launcher == "srun");
  }
  CHECK(tj::dist::text_hash("abc") == tj::dist::text_hash("abc"));
  CHECK(tj::dist::text_hash("abc") != tj::dist::text_hash("abd"));
}

TEST_CASE("pipeline parts: each rank's rows of every batch, together the whole batch", "[runtime][mpi][pipeline]") {
  tj::data::Dataset d{tj::HostTensor(tj::Shape{50, 2}), tj::HostTensor(tj::Shape{50}, tj::DType::i32)};
  for (int64_t i = 0; i < 50; ++i) d.labels.i32[i] = static_cast<int32_t>(i);
  // Batches of 16 over 3 ranks of one tower: slices 5, 5, 6; the epoch's last batch of 2 is
  // dropped (min_batch 3: fewer examples than towers).
  const tj::data::PipelineOptions base{.batch = 16, .seed = 3, .min_batch = 3};
  tj::data::BatchPipeline whole(d, base);
  std::vector<std::unique_ptr<tj::data::BatchPipeline>> parts;
  for (int rank = 0; rank < 3; ++rank) {
    tj::data::PipelineOptions o = base;
    o.part = [rank](int64_t n) {
      const auto slices = tj::split_batch(n, 3, tj::Split::remainder_last);
      int64_t first = 0;
      for (int r = 0; r < rank; ++r) first += slices[r];
      return std::pair<int64_t, int64_t>{first, slices[rank]};
    };
    parts.push_back(std::make_unique<tj::data::BatchPipeline>(d, o));
  }
  for (int b = 0; b < 6; ++b) {  // two epochs of 3 batches (the last partial batch of 2 is dropped: min_batch 3)
    const tj::data::Batch all = whole.next();
    std::vector<int32_t> joined;
    for (auto& p : parts) {
      const tj::data::Batch part = p->next();
      CHECK(part.whole == all.size());
      CHECK(part.whole_size() == all.size());
      CHECK(part.index == all.index);
      joined.insert(joined.end(), part.feeds.at("label").i32.begin(), part.feeds.at("label").i32.end());
    }
    CHECK(joined == all.feeds.at("label").i32);
  }
}

TEST_CASE("alone, a trainer's own rows are the whole batch, and a part of the whole batch is all of it",
          "[runtime][mpi][towers]") {
  tj::Graph graph;
  tj::Tensor loss = tj::testing::small_mlp_loss(graph);
  tj::TowerTrainer a(graph, loss, tj::Towers{tj::cpu(0), tj::cpu(1)}, tj::sgd(0.1));
  CHECK(a.own_rows(15) == std::pair<int64_t, int64_t>{0, 15});
  CHECK(a.world_layout().towers() == 2);
  CHECK(a.world_layout().first_tower == 0);
  CHECK_FALSE(tj::detail::async_world(a));
  tj::Graph graph_b;
  tj::Tensor loss_b = tj::testing::small_mlp_loss(graph_b);
  tj::TowerTrainer b(graph_b, loss_b, tj::Towers{tj::cpu(0), tj::cpu(1)}, tj::sgd(0.1));
  for (int step = 0; step < 3; ++step) {
    const tj::HostFeeds batch = tj::testing::batch_of(15, step);
    const double la = a.step(batch).loss;
    const double lb = b.step(batch, {.whole_batch = 15}).loss;
    CHECK(la == lb);
  }
  CHECK_THROWS_WITH(b.step(tj::testing::batch_of(7, 9), {.whole_batch = 15}),
                    Catch::Contains("step: fed 7 examples as this process's part of a batch of 15, but its towers' "
                                    "slices hold 15 (rows 0 to 14)"));
}
