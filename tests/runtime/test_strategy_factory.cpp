// The factory's table: which strategy each combination gets, the one error for a combination no
// row serves, and the strategy options with their environment overrides.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "runtime/towers/tower_strategy.h"
#include "tests/runtime/tower_test_model.h"

namespace tj = towerjit;
using tj::detail::StrategyRequest;

namespace {

std::string chosen(const StrategyRequest& q) {
  const tj::detail::StrategyRow* row = tj::detail::find_strategy(q);
  return row ? row->name : "none";
}

}  // namespace

TEST_CASE("the factory's table picks one strategy per combination", "[towers][strategy]") {
  StrategyRequest q;
  CHECK(chosen(q) == "sync_host");
  q.variant = tj::SyncVariant::parameter_server;
  CHECK(chosen(q) == "sync_host_one_copy");
  q.all_gpus = true;
  q.gpu_variables = true;
  CHECK(chosen(q) == "sync_placed");  // each variable on one GPU
  q.processes = 2;
  CHECK(chosen(q) == "sync_gpu");  // one copy per GPU, either variant
  q.variant = tj::SyncVariant::replicated;
  q.processes = 1;
  CHECK(chosen(q) == "sync_gpu");
  StrategyRequest a;
  a.async = true;
  CHECK(chosen(a) == "async_local");
  a.processes = 3;
  CHECK(chosen(a) == "async_server");
  a.rank = 2;
  CHECK(chosen(a) == "async_worker");
  CHECK_FALSE(tj::detail::find_strategy(a)->runs_towers == false);
}

TEST_CASE("a combination no row serves is one error naming the change and listing the table", "[towers][strategy]") {
  StrategyRequest q;
  q.all_gpus = true;
  q.gpu_variables = true;
  q.deterministic_layout = true;
  q.processes = 2;
  CHECK(chosen(q) == "none");
  CHECK_THROWS_WITH(tj::detail::require_strategy(q, tj::Loc::current()),
                    Catch::Contains("TOWERJIT_DETERMINISTIC=layout with the variables on the GPUs is not built") &&
                        Catch::Contains("the supported combinations:") &&
                        Catch::Contains("sync_host: sync replicated, any devices, any processes") &&
                        Catch::Contains("async_worker: async") && Catch::Contains("test_strategy_factory.cpp:"));
}

TEST_CASE("strategy options are the trainer's, and a TOWERJIT_ variable that is set overrides them", "[towers][strategy]") {
  const tj::Towers towers{tj::cpu(0), tj::cpu(1)};
  tj::dist::Transport& world = tj::dist::world();
  ::unsetenv("TOWERJIT_BUCKET_MB");
  ::unsetenv("TOWERJIT_DETERMINISTIC");
  auto q = StrategyRequest::of(towers, world, {.deterministic_layout = true, .bucket_mb = 7});
  CHECK(q.bucket_mb == 7);
  CHECK(q.deterministic_layout);
  CHECK(q.settings().at("TOWERJIT_DETERMINISTIC") == "layout");
  ::setenv("TOWERJIT_BUCKET_MB", "0.5", 1);
  ::setenv("TOWERJIT_DETERMINISTIC", "off", 1);
  q = StrategyRequest::of(towers, world, {.deterministic_layout = true, .bucket_mb = 7});
  CHECK(q.bucket_mb == 0.5);
  CHECK_FALSE(q.deterministic_layout);
  ::unsetenv("TOWERJIT_BUCKET_MB");
  ::unsetenv("TOWERJIT_DETERMINISTIC");
  // GPU variables ask nothing of CPU towers.
  CHECK(StrategyRequest::of(towers, world, {.gpu_variables = true}).gpu_variables == false);
  tj::Graph graph;
  const tj::Tensor loss = tj::testing::small_mlp_loss(graph);
  CHECK_THROWS_WITH(tj::TowerTrainer(graph, loss, towers, tj::sgd(0.1), {.strategy = {.bucket_mb = -1}}),
                    Catch::Contains("TowerStrategyOptions::bucket_mb -1 is negative"));
}

TEST_CASE("async GPU towers keep each variable on a GPU by the seed's rule unless told not to", "[towers][strategy]") {
  tj::dist::Transport& world = tj::dist::world();
  ::unsetenv("TOWERJIT_GPU_VARIABLES");
  const tj::Towers two{tj::gpu(0), tj::gpu(1)};
  auto q = StrategyRequest::of(two.reduce(tj::AsyncApply{}), world, {});
  CHECK(q.gpu_variables);
  CHECK(chosen(q) == "async_placed");
  CHECK(q.settings().at("the variables (TOWERJIT_GPU_VARIABLES and the towers' devices)") == "on the GPUs");
  // Asked not to, or by the environment: host memory.
  CHECK(chosen(StrategyRequest::of(two.reduce(tj::AsyncApply{}), world, {.gpu_variables = false})) == "async_local");
  ::setenv("TOWERJIT_GPU_VARIABLES", "off", 1);
  CHECK(chosen(StrategyRequest::of(two.reduce(tj::AsyncApply{}), world, {})) == "async_local");
  ::unsetenv("TOWERJIT_GPU_VARIABLES");
  // From 4 towers on (several on one GPU count), the seed keeps them on the CPU, asked or not.
  const tj::Towers four{tj::gpu(0), tj::gpu(0), tj::gpu(1), tj::gpu(1)};
  CHECK(chosen(StrategyRequest::of(four.reduce(tj::AsyncApply{}), world, {})) == "async_local");
  CHECK(chosen(StrategyRequest::of(four.reduce(tj::AsyncApply{}), world, {.gpu_variables = true})) == "async_local");
  // Sync GPU towers keep them in host memory unless asked; the parameter-server variant then
  // places each by the same rule; CPU towers always keep them in host memory.
  CHECK(chosen(StrategyRequest::of(two, world, {})) == "sync_host");
  const tj::Towers ps = two.variant(tj::SyncVariant::parameter_server);
  CHECK(chosen(StrategyRequest::of(ps, world, {})) == "sync_host_one_copy");
  CHECK(chosen(StrategyRequest::of(ps, world, {.gpu_variables = true})) == "sync_placed");
  CHECK(chosen(StrategyRequest::of(four.variant(tj::SyncVariant::parameter_server), world, {.gpu_variables = true})) ==
        "sync_host_one_copy");
  CHECK(chosen(StrategyRequest::of(four, world, {.gpu_variables = true})) == "sync_gpu");
  CHECK(chosen(StrategyRequest::of(tj::Towers{tj::cpu(0)}.reduce(tj::AsyncApply{}), world, {})) == "async_local");
  // Across processes the parameter server holds them.
  StrategyRequest several = StrategyRequest::of(two.reduce(tj::AsyncApply{}), world, {});
  several.processes = 2;
  CHECK(chosen(several) == "async_server");
}

TEST_CASE("gradient compression is served where sync gradients are all-reduced across processes", "[towers][strategy]") {
  StrategyRequest q;
  q.processes = 2;
  q.gradient_compression = tj::DType::bf16;
  CHECK(chosen(q) == "sync_host");
  q.variant = tj::SyncVariant::parameter_server;
  CHECK(chosen(q) == "sync_host_one_copy");
  StrategyRequest layout = q;
  layout.deterministic_layout = true;
  CHECK(chosen(layout) == "none");
  q.all_gpus = q.gpu_variables = true;
  CHECK(chosen(q) == "sync_gpu");  // NCCL and MPI in 16 bits
  q.async = true;
  CHECK(chosen(q) == "none");
  CHECK_THROWS_WITH(tj::detail::require_strategy(layout, tj::Loc::current()),
                    Catch::Contains("gradient compression (TowerStrategyOptions::gradient_compression) is built for "
                                    "sync towers all-reducing their gradients") &&
                        Catch::Contains("sync_host: sync replicated, any devices, any processes, variables in host "
                                        "memory, gradient compression"));
  // One process: every strategy takes the option (and ignores it unless NCCL joins GPUs).
  q.async = false;
  q.processes = 1;
  CHECK(chosen(q) == "sync_placed");
  tj::Graph graph;
  const tj::Tensor loss = tj::testing::small_mlp_loss(graph);
  CHECK_THROWS_WITH(tj::TowerTrainer(graph, loss, tj::Towers{tj::cpu(0)}, tj::sgd(0.1),
                                     {.strategy = {.gradient_compression = tj::DType::i32}}),
                    Catch::Contains("TowerStrategyOptions::gradient_compression is i32; gradients cross processes in "
                                    "DType::bf16 or DType::f16, or uncompressed (DType::f32)") &&
                        Catch::Contains("test_strategy_factory.cpp:"));
}
