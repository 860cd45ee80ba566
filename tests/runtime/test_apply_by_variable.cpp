// The apply side cut by variable (runtime/towers/apply_by_variable.h), which async GPU towers
// run one variable at a time on each variable's GPU: which updates each variable's apply holds,
// that the pieces run one after the other compute what the whole apply does, and the error for
// an apply that cannot be cut.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "runtime/towers/apply_by_variable.h"
#include "runtime/towers/compile_towers.h"
#include "tests/runtime/tower_test_model.h"

namespace tj = towerjit;
using tj::testing::largest_relative_difference;

namespace {

tj::detail::CompiledTowers compiled(tj::Graph& graph, const tj::Optimizer& optimizer, tj::Loc loc = tj::Loc::current()) {
  const tj::Tensor loss = tj::testing::small_mlp_loss(graph);
  return tj::detail::compile_towers(graph, loss, tj::Towers{tj::cpu(0)}, optimizer,
                                    {.ema = tj::ExponentialMovingAverage{.decay = 0.9}}, {nullptr}, loc);
}

// Gradients for every variable, drawn from `seed`.
tj::HostFeeds gradients(const tj::detail::CompiledTowers& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  tj::HostFeeds feeds{{tj::TowerProgram::gradient_scale, tj::scalar(0.5)}};
  for (size_t v = 0; v < c.gradient_inputs.size(); ++v) {
    tj::HostTensor g(c.gradient_shapes[v]);
    for (float& x : g.f32) x = u(rng);
    feeds[c.gradient_inputs[v]] = g;
  }
  return feeds;
}

}  // namespace

TEST_CASE("the apply cut by variable: each variable with its slots and EMA shadow, the global step shared", "[towers][strategy]") {
  tj::Graph graph;
  const tj::detail::CompiledTowers c = compiled(graph, tj::adam(0.01));
  const tj::detail::ApplyByVariable split = tj::detail::split_apply_by_variable(c, tj::Loc::current());
  CHECK(split.global_step == "global_step");
  CHECK(split.shared.size() == 1);
  REQUIRE(split.variables.size() == 4);
  for (size_t v = 0; v < split.variables.size(); ++v) {
    const tj::detail::VariableApply& a = split.variables[v];
    CHECK(a.gradient_input == c.gradient_inputs[v]);
    std::vector<std::string> state = a.state, expected = {a.variable, a.variable + "/adam_m", a.variable + "/adam_v",
                                                          c.ema_shadows.at(a.variable)};
    std::sort(state.begin(), state.end());
    std::sort(expected.begin(), expected.end());
    CHECK(state == expected);
    CHECK(a.updates.size() == 4);
  }
}

TEST_CASE("the applies of each variable, then the global step's, compute what the whole apply does", "[towers][strategy]") {
  // Adam with an EMA: the bias corrections and the EMA's decay read the global step, which each
  // variable's apply reads and only the shared part increments. Every element goes through the
  // same f32 operations either way; the two programs may differ only in which products they
  // contract into FMAs, one rounding (2^-24 relative) per operation at most, over fewer than 16
  // operations per element and apply: 3 applies stay within 3 * 16 * 2^-24 < 3e-6.
  tj::Graph graph;
  const tj::detail::CompiledTowers c = compiled(graph, tj::adam(0.01));
  const tj::detail::ApplyByVariable split = tj::detail::split_apply_by_variable(c, tj::Loc::current());
  std::unique_ptr<tj::CpuProgram> whole = c.make_apply();
  std::vector<std::unique_ptr<tj::CpuProgram>> pieces;
  for (const tj::detail::VariableApply& a : split.variables)
    pieces.push_back(std::make_unique<tj::CpuProgram>(c.apply_side->graph, std::vector<tj::Tensor>{}, a.updates));
  tj::CpuProgram shared(c.apply_side->graph, c.apply_fetches, split.shared);
  tj::HostVariables one = c.initial, by_variable = c.initial;
  for (uint32_t k = 0; k < 3; ++k) {
    const tj::HostFeeds feeds = gradients(c, 40 + k);
    const double rate = whole->run(feeds, one, k)[0].f32[0];
    for (auto& piece : pieces) piece->run(feeds, by_variable, k);
    CHECK(shared.run({}, by_variable, k)[0].f32[0] == rate);
  }
  CHECK(by_variable.at("global_step").f32[0] == 3);
  CHECK(largest_relative_difference(one, by_variable) < 3e-6);
  CHECK(largest_relative_difference(one, c.initial) > 1e-3);  // the applies did change them
}

TEST_CASE("an apply that reads every gradient cannot be cut by variable", "[towers][strategy][errors]") {
  tj::Graph graph;
  const tj::detail::CompiledTowers c = compiled(graph, tj::sgd(0.1).with_clip_by_global_norm(1.0));
  const int line = __LINE__ + 1;
  CHECK_THROWS_WITH(tj::detail::split_apply_by_variable(c, tj::Loc::current()),
                    Catch::Contains("the apply of \"fc1/kernel\" reads \"tower_gradient/") &&
                        Catch::Contains("clip_by_global_norm sums every gradient") &&
                        Catch::Contains("TowerStrategyOptions::gpu_variables = false") &&
                        Catch::Contains("test_apply_by_variable.cpp:" + std::to_string(line)));
}
