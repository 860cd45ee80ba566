// Loss scaling across towers: with a power-of-two scale every gradient is scaled and unscaled
// exactly, so sync towers trained with loss scaling end bitwise where the same towers without
// it end; a step whose scaled gradients overflow (injected at a known step) is skipped on
// every tower, and the scale's state travels with the variables.
#include <catch2/catch.hpp>
#include <cstring>

#include "tests/runtime/tower_test_model.h"

namespace tj = towerjit;
using Catch::Contains;

namespace {

// The small MLP's loss plus a term whose value is 0 and whose gradient is spike per element of
// fc1's kernel: a spike of 1e36 overflows f32 once scaled (by 2048), and leaves the loss finite.
tj::Tensor spiked_loss(tj::Graph& graph) {
  tj::Tensor loss = tj::testing::small_mlp_loss(graph);
  tj::GraphScope use(graph);
  tj::Tensor kernel;
  for (const tj::Tensor& v : tj::trainable_variables())
    if (v.node().attrs.name == "fc1/kernel") kernel = v;
  tj::Tensor t = tj::mean(tj::input("spike", {tj::kBatch})) * tj::sum(kernel);
  return loss + (t - tj::stop_gradient(t));
}

tj::HostFeeds batch(uint32_t seed, float spike = 0) {
  tj::HostFeeds b = tj::testing::batch_of(13, seed);  // 13: an uneven split over two towers
  tj::HostTensor s({13});
  for (float& v : s.f32) v = spike;
  b["spike"] = s;
  return b;
}

}  // namespace

TEST_CASE("sync towers with loss scaling skip the overflowed step and otherwise train bitwise as without", "[towers]") {
  const tj::DynamicLossScale rules{.initial = 1024, .growth_interval = 2};
  const auto plain = tj::momentum(0.1, 0.9);
  tj::Graph ga, gb;
  tj::TowerTrainer a(ga, spiked_loss(ga), tj::Towers{tj::cpu(0), tj::cpu(1)}, plain);
  tj::TowerTrainer b(gb, spiked_loss(gb), tj::Towers{tj::cpu(0), tj::cpu(1)}, plain.with_loss_scale(rules));
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    if (seed == 3) {  // the overflow: skipped, its loss still reported
      const auto skipped = b.step(batch(seed, 1e36f));
      CHECK(std::isfinite(skipped.loss));
      CHECK(b.variables().at(tj::DynamicLossScale::kSkippedSteps).f32[0] == 1);
      CHECK(b.variables().at(tj::DynamicLossScale::kScale).f32[0] == 1024);  // grown to 2048, backed off
    }
    const auto ra = a.step(batch(seed)), rb = b.step(batch(seed));
    CHECK(ra.loss == rb.loss);
  }
  for (const auto& [name, t] : a.variables()) {
    INFO("variable \"" << name << "\"");
    if (name == "global_step") {
      CHECK(t.f32[0] == 5);
      CHECK(b.variables().at(name).f32[0] == 6);  // the skipped step counts
      continue;
    }
    CHECK(std::memcmp(t.data(), b.variables().at(name).data(), t.size() * 4) == 0);
  }
  // After the skip: seeds 3 and 4 grow it back to 2048, seed 5 is one good step.
  CHECK(b.variables().at(tj::DynamicLossScale::kScale).f32[0] == 2048);
  CHECK(b.variables().at(tj::DynamicLossScale::kGoodSteps).f32[0] == 1);
}

TEST_CASE("loss scaling is refused where each variable applies by itself", "[towers]") {
  tj::Graph graph;
  tj::Tensor loss = tj::testing::small_mlp_loss(graph);
  CHECK_THROWS_WITH(tj::TowerTrainer(graph, loss,
                                     tj::Towers{tj::cpu(0), tj::cpu(1)}.with(tj::variables("fc1/*"), tj::AsyncApply{}),
                                     tj::sgd(0.1).with_loss_scale()),
                    Contains("loss scaling (Optimizer::with_loss_scale) skips a step when any gradient is not finite") &&
                        Contains("train without loss scaling"));
}
