// Inference mode (dsl/phase.h): a model written once with batch_norm and dropout trains with
// batch statistics and masks, while predict() and evaluate() run it as the same model built
// by hand for inference (moving statistics, no dropout) computes it.
#include <catch2/catch.hpp>
#include <cmath>

#include "../jit/jit_check.h"
#include "jit/passes/select_phase.h"
#include "jit/reference/interpreter.h"
#include "runtime/cpu/cpu_program.h"
#include "tower_test_model.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::testing::batch_of;

namespace {

// 5 -> dense 6 -> batch norm -> relu -> dropout 0.5 -> dense 3. `phase` unset: the layers
// follow the program; set: fixed when built (the hand-built graph of that phase).
tj::Tensor bn_dropout_logits(std::optional<bool> training) {
  auto x = tj::input("x", {kBatch, 5});
  auto h = tj::dense(x, 6, "fc1");
  h = training ? tj::batch_norm(h, *training, "bn") : tj::batch_norm(h, "bn");
  h = tj::relu(h);
  h = training ? tj::dropout(h, 0.5, *training) : tj::dropout(h, 0.5);
  return tj::dense(h, 3, "fc2");
}

tj::Towers two_cpu_towers() { return tj::Towers({tj::cpu(0), tj::cpu(1)}); }

tj::reference::Variables as_arrays(const tj::HostVariables& values) {
  tj::reference::Variables out;
  for (const auto& [name, t] : values) out[name] = tj::testing::to_array(t);
  return out;
}

}  // namespace

TEST_CASE("predict and evaluate run a batch-norm and dropout model in inference, as the model built for inference computes", "[towers][runtime][phase]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const tj::Tensor logits = bn_dropout_logits(std::nullopt);
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  const tj::Tensor loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
  tj::TowerTrainer trainer(g, loss, two_cpu_towers(), tj::momentum(0.1, 0.9), {.logits = logits});
  for (int s = 0; s < 5; ++s) trainer.step(batch_of(15, 10 + s));  // uneven: 7 and 8

  tj::Graph by_hand;
  tj::GraphScope use_hand(by_hand);
  const tj::Tensor inference_logits = bn_dropout_logits(false);
  REQUIRE_FALSE(tj::depends_on_phase(by_hand));

  const tj::HostFeeds eval = batch_of(127, 99);
  const tj::HostTensor predicted = trainer.predict({{"x", eval.at("x")}});
  tj::reference::Variables values = as_arrays(trainer.variables());
  // The moving statistics have moved: inference differs from the batch's statistics.
  CHECK(values.at("bn/moving_mean")[0] != 0);
  tj::reference::ErrorBounds bounds;
  const auto want = tj::reference::run(by_hand, {inference_logits}, {{"x", tj::testing::to_array(eval.at("x"))}},
                                       values, {.bounds = &bounds});
  tj::testing::check_within_bounds(tj::testing::to_array(predicted), want[0], bounds.fetches[0], "inference logits");

  // evaluate() scores those logits: its loss is the inference model's cross-entropy.
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t i = 0; i < 127; ++i) {
    double largest = -INFINITY, sum = 0;
    int best = 0;
    for (int c = 0; c < 3; ++c)
      if (want[0][i * 3 + c] > largest) largest = want[0][i * 3 + c], best = c;
    for (int c = 0; c < 3; ++c) sum += std::exp(want[0][i * 3 + c] - largest);
    loss_sum += largest + std::log(sum) - want[0][i * 3 + eval.at("labels").i32[i]];
    correct += best == eval.at("labels").i32[i];
  }
  const auto evaluation = trainer.evaluate({{"x", eval.at("x")}}, eval.at("labels"), false, 50);
  CHECK(evaluation.loss == Approx(loss_sum / 127).epsilon(1e-5));
  CHECK(evaluation.accuracy == Approx(static_cast<double>(correct) / 127).margin(1.5 / 127));
}

TEST_CASE("a model written once trains with batch statistics and dropout masks", "[towers][runtime][phase]") {
  // One tower's step on the model that follows the program equals the step of the model built
  // for training: the same loss and the same updated variables, moving statistics included.
  auto train = [](std::optional<bool> training) {
    auto g = std::make_unique<tj::Graph>();
    tj::GraphScope use(*g);
    const tj::Tensor logits = bn_dropout_logits(training);
    auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
    const tj::Tensor loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
    tj::TowerTrainer trainer(*g, loss, tj::Towers({tj::cpu(0)}), tj::sgd(0.1));
    std::vector<double> losses;
    for (int s = 0; s < 3; ++s) losses.push_back(trainer.step(batch_of(16, 20 + s)).loss);
    return std::make_pair(losses, trainer.variables());
  };
  const auto [follow_losses, follow_values] = train(std::nullopt);
  const auto [fixed_losses, fixed_values] = train(true);
  CHECK(follow_losses == fixed_losses);
  for (const auto& [name, t] : fixed_values) {
    INFO(name);
    CHECK(follow_values.at(name).f32 == t.f32);
  }
}

TEST_CASE("by_phase picks its training value in a program as built and its inference value once selected", "[dsl][phase]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {3});
  const tj::Tensor y = tj::by_phase(tj::mul(x, 2.0), tj::add(x, 1.0));
  const tj::Tensor dy = tj::grad(tj::sum(y), {x})[0];
  const tj::reference::Feeds feeds = {{"x", tj::testing::random_array({3}, 1)}};
  tj::reference::Variables none;
  const auto trained = tj::reference::run(g, {y, dy}, feeds, none);
  tj::Rewritten inference = tj::select_phase(g, tj::Phase::inference);
  const auto inferred = tj::reference::run(inference.graph, tj::remap_tensors(inference, {y}), feeds, none);
  for (int i = 0; i < 3; ++i) {
    CHECK(trained[0][i] == 2 * feeds.at("x")[i]);
    CHECK(trained[1][i] == 2);  // the gradient follows the training value
    CHECK(inferred[0][i] == feeds.at("x")[i] + 1);
  }
  tj::CpuProgram program(g, {y});
  tj::HostVariables host_none;
  const auto jit = program.run({{"x", tj::testing::to_host(feeds.at("x"))}}, host_none);
  CHECK(jit[0].f32[1] == static_cast<float>(2 * feeds.at("x")[1]));
}

TEST_CASE("by_phase of tensors that differ is an error naming both", "[dsl][phase][errors]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {3});
  auto z = tj::input("z", {4});
  CHECK_THROWS_WITH(tj::by_phase(x, z), Catch::Contains("by_phase: the training value") &&
                                            Catch::Contains("f32[3]") && Catch::Contains("f32[4]") &&
                                            Catch::Contains("test_inference_phase.cpp"));
}
