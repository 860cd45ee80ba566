// A strategy added from outside the library, as docs/strategies.md ("Adding a strategy") shows:
// local SGD ("sync every K steps"). Every tower keeps its own copy of the variables, applies its
// own gradient to it every step with no reduction, and every K steps the copies are replaced by
// their mean. The strategy is the class below and one row; the trainer, fit() and the factory
// are untouched. With K = 1 and plain SGD on an even split it computes the synchronous step
// (the mean of w - lr g_i is w - lr times the mean of g_i), which is the oracle here.
#include <catch2/catch.hpp>

#include "runtime/towers/tower_strategy.h"
#include "runtime/towers/trainer_internals.h"
#include "tests/runtime/tower_test_model.h"

namespace tj = towerjit;
using namespace towerjit::detail;
using towerjit::testing::largest_relative_difference;

namespace {

// ---- the strategy: under 150 lines with its row ----
class LocalSgd final : public TowerStrategy {
 public:
  LocalSgd(TowerState& state, int every) : TowerStrategy(state), every_(every), copies_(state.towers.size(), state.compiled.initial) {
    for (int t = 0; t < state.towers.size(); ++t) apply_.push_back(state.compiled.make_apply());
  }

  StepResult step(const tj::HostFeeds& batch, int64_t whole_batch, tj::Loc loc) override {
    const BatchSplit split = split_step_batch(batch, whole_batch, state_.towers, state_.layout, loc);
    std::vector<double> losses(split.own), rates(split.own);
    const auto& names = state_.compiled.gradient_inputs;
    const auto& updates = state_.compiled.model_updates;
    state_.on_tower_threads(split.own, [&](int t) {
      TowerOutputs out = state_.run_tower(t, split, copies_[t]);
      tj::HostFeeds gradients;
      for (size_t v = 0; v < names.size(); ++v) gradients[names[v]] = std::move(out.gradient(v));
      gradients[tj::TowerProgram::gradient_scale] = tj::scalar(1.0);
      rates[t] = apply_[t]->run(gradients, copies_[t], static_cast<uint64_t>(state_.applies))[0].f32[0];
      for (size_t u = 0; u < updates.size(); ++u) copies_[t].at(updates[u].variable) = std::move(out.update(u));
      losses[t] = out.loss();
    });
    ++state_.applies;
    if (state_.applies % every_ == 0) average();
    StepResult result{.learning_rate = rates[0], .slices = split.slices};
    for (int t = 0; t < split.own; ++t) result.loss += split.share(t) * losses[t];
    return result;
  }

  // Tower 0's copy: between averages the copies differ, as local SGD's do.
  tj::HostVariables& variables() override { return copies_[0]; }
  void restore(const tj::HostVariables& values) override {
    for (auto& copy : copies_) copy = values;
  }
  void list_programs(const AddProgram& add) const override {
    add(apply_[0]->name(), "every step, on each tower's own copy", apply_[0]->lowered_graph(), apply_[0]->program());
  }
  const std::vector<tj::HostVariables>& copies() const { return copies_; }

 private:
  // Every f32 variable (weights and optimiser slots) replaced by the copies' mean, in double.
  void average() {
    for (auto& [name, first] : copies_[0]) {
      if (first.dtype != tj::DType::f32) continue;
      for (int64_t k = 0; k < first.size(); ++k) {
        double sum = 0;
        for (const auto& copy : copies_) sum += copy.at(name).f32[k];
        const auto mean = static_cast<float>(sum / static_cast<double>(copies_.size()));
        for (auto& copy : copies_) copy.at(name).f32[k] = mean;
      }
    }
  }

  const int every_;
  std::vector<tj::HostVariables> copies_;
  std::vector<std::unique_ptr<tj::CpuProgram>> apply_;
};

int g_every = 1;                // K, for the factory below
const LocalSgd* g_made = nullptr;  // the last one made, for the test to look into

std::unique_ptr<TowerStrategy> make_local_sgd(TowerState& state, tj::Loc) {
  auto s = std::make_unique<LocalSgd>(state, g_every);
  g_made = s.get();
  return s;
}

// Its row: sync replicated towers in one process, variables in host memory.
using R = StrategyRow;
const StrategyRow kLocalSgdRow = {"local_sgd", R::Reduce::sync, R::Variant::replicated, R::Devices::any,
                                  R::Processes::one, R::Variables::host, true, true, make_local_sgd};
// ---- end of the strategy ----

std::pair<std::unique_ptr<tj::Graph>, std::unique_ptr<tj::TowerTrainer>> trainer(const tj::Optimizer& opt) {
  auto graph = std::make_unique<tj::Graph>();
  const tj::Tensor loss = tj::testing::small_mlp_loss(*graph);
  auto t = std::make_unique<tj::TowerTrainer>(*graph, loss, tj::Towers{tj::cpu(0), tj::cpu(1)}, opt);
  return {std::move(graph), std::move(t)};
}

}  // namespace

TEST_CASE("a strategy added as a file and a row: local SGD with K = 1 and SGD is the sync step", "[towers][strategy]") {
  auto [sync_graph, sync] = trainer(tj::sgd(0.1));
  g_every = 1;
  const ExtraStrategyRow row(kLocalSgdRow);
  auto [local_graph, local] = trainer(tj::sgd(0.1));
  REQUIRE(g_made != nullptr);
  for (int s = 0; s < 10; ++s) {
    const tj::HostFeeds batch = tj::testing::batch_of(16, 100 + s);  // 8 and 8: the shares are equal
    const double a = sync->step(batch).loss, b = local->step(batch).loss;
    CHECK(std::abs(a - b) <= 1e-5 * std::max(1.0, std::abs(a)));
  }
  // The copies' float rounding differs from the reduced sum's by a few ulps a step: the sync
  // tests' bound for 20 steps (test_tower_trainer.cpp) covers these 10.
  CHECK(largest_relative_difference(sync->variables(), local->variables()) < 1e-5);
  CHECK(local->applies() == 10);
}

TEST_CASE("local SGD's copies drift between averages and are equal after every K-th step", "[towers][strategy]") {
  g_every = 3;
  const ExtraStrategyRow row(kLocalSgdRow);
  auto [graph, local] = trainer(tj::momentum(0.1, 0.9));
  for (int s = 1; s <= 6; ++s) {
    local->step(tj::testing::batch_of(15, 200 + s));  // 7 and 8
    const double drift = largest_relative_difference(g_made->copies()[0], g_made->copies()[1]);
    if (s % 3 == 0) CHECK(drift == 0);
    else CHECK(drift > 0);
  }
}

TEST_CASE("without its row the factory picks the table's sync strategy again", "[towers][strategy]") {
  g_made = nullptr;
  { const ExtraStrategyRow row(kLocalSgdRow); }
  auto [graph, t] = trainer(tj::sgd(0.1));
  CHECK(g_made == nullptr);
  CHECK(programs(*t).at(1).runs == "once per step per copy of the variables, on the reduced gradients");
}
