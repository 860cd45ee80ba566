// Per-variable reductions (Towers::with): the variables an AsyncApply rule names are applied
// from each tower's own gradient as soon as that tower has run (s g_i, s = 1/N with
// scale_gradient), one apply at a time under the apply lock, in the order the towers finish;
// the rest are reduced as the towers declare (the Reducer: sync average, per-tower mean or
// sum) and applied once per step, with the global step's increment. The recommender layout:
// an embedding's sparse rows pushed as they come, the dense layers averaged. One process, the
// variables in host memory: one copy, which the rules' applies write while other towers still
// run, so each tower reads a copy of its own, refreshed at the start of every step.
#include <algorithm>
#include <sstream>

#include "dsl/error.h"
#include "runtime/towers/apply_by_variable.h"
#include "runtime/towers/reducer.h"
#include "runtime/towers/tower_strategy.h"

namespace towerjit::detail {
namespace {

// An async rule's dense gradient at or above this size is refused: every tower would apply
// the whole of it by itself, N dense applies a step where the sync average makes one. It is
// the size of the first bucket the Reducer starts across processes (reducer.cpp).
constexpr int64_t kLargeDenseBytes = 1 << 20;

// Which rule (its index) each trainable variable follows, or -1. Errors (at the rule's line):
// a pattern that names no trainable variable, a variable two rules name, an async rule on a
// dense gradient of kLargeDenseBytes or more.
std::vector<int> match_rules(const TowerState& state, const ApplyByVariable& split) {
  const std::vector<VariableRule>& rules = state.towers.rules();
  std::vector<int> rule_of(split.variables.size(), -1);
  for (size_t r = 0; r < rules.size(); ++r) {
    const VariableSelection& sel = rules[r].selection;
    bool any = false;
    for (size_t v = 0; v < split.variables.size(); ++v) {
      const std::string& name = split.variables[v].variable;
      if (!matches_pattern(sel.pattern, name)) continue;
      any = true;
      user_check(rule_of[v] < 0, sel.loc)
          << "Towers::with: variable \"" << name << "\" is named by two per-variable rules, variables(\""
          << rules[rule_of[v]].selection.pattern << "\") at " << format_location(rules[rule_of[v]].selection.loc)
          << " and variables(\"" << sel.pattern << "\"); a variable follows one rule: make the patterns disjoint";
      rule_of[v] = static_cast<int>(r);
      const int64_t bytes = state.compiled.gradient_shapes[v].static_elements() * 4;
      user_check(state.compiled.is_sparse(v) || bytes < kLargeDenseBytes, sel.loc)
          << "Towers::with(variables(\"" << sel.pattern << "\"), " << to_string(rules[r].reduction) << ") names \""
          << name << "\", whose gradient is dense (f32" << state.compiled.gradient_shapes[v].str() << ", "
          << bytes / 1024 << " KiB): each tower would apply all of it by itself, " << state.towers.size()
          << " dense applies a step where the sync average makes one; apply by rule only sparse gradients "
          << "(an embedding's, sparse = true, with CPU towers and an optimiser that applies rows) or dense ones "
          << "under 1 MiB, or drop the rule";
    }
    if (!any) {
      std::ostringstream names;
      for (size_t v = 0; v < split.variables.size(); ++v) names << (v ? ", \"" : "\"") << split.variables[v].variable << "\"";
      user_check(false, sel.loc) << "Towers::with: variables(\"" << sel.pattern << "\") names no trainable variable "
                                 << "of the model (its variables: " << names.str() << "); fix the pattern ('*' "
                                 << "matches any run of characters, '/' included; '?' one character)";
    }
  }
  return rule_of;
}

class SyncAsyncByVariable final : public TowerStrategy {
 public:
  SyncAsyncByVariable(TowerState& state, Loc loc)
      : TowerStrategy(state),
        values_(state.compiled.initial),
        reads_(state.towers.size(), state.compiled.initial),
        reducer_(state, false, static_cast<int64_t>(state.options.bucket_mb * (1 << 20))) {
    const CompiledTowers& c = state.compiled;
    split_ = split_apply_by_variable(c, loc);
    rule_of_ = match_rules(state, split_);
    std::vector<Tensor> rest;  // the sync variables' updates, then the global step's
    for (size_t v = 0; v < split_.variables.size(); ++v) {
      const VariableApply& a = split_.variables[v];
      if (rule_of_[v] < 0) {
        rest.insert(rest.end(), a.updates.begin(), a.updates.end());
        continue;
      }
      own_.push_back({v, std::make_unique<CpuProgram>(c.apply_side->graph, c.apply_fetches, a.updates, nullptr,
                                                      "apply_" + a.variable)});
    }
    rest.insert(rest.end(), split_.shared.begin(), split_.shared.end());
    apply_ = std::make_unique<CpuProgram>(c.apply_side->graph, c.apply_fetches, rest, nullptr, "apply");
  }

  StepResult step(const HostFeeds& batch, int64_t whole_batch, Loc loc) override {
    BatchSplit split = split_step_batch(batch, whole_batch, state_.towers, state_.layout, loc);
    for (HostVariables& copy : reads_) copy = values_;
    std::vector<TowerOutputs> outputs(split.own);
    const uint64_t key = static_cast<uint64_t>(state_.applies);
    state_.on_tower_threads(split.own, [&](int t) {
      outputs[t] = state_.run_tower(t, split, reads_[t]);
      const std::lock_guard<std::mutex> lock(state_.apply_mutex);
      apply_own(outputs[t], split.slices, key);
    });
    StepResult result;
    result.slices = split.slices;
    Reduced reduced = reducer_.reduce(std::move(outputs), split.weights, split.shares, loc);
    result.learning_rate = apply_->run(reduced.gradients, values_, key)[0].f32[0];
    const auto& updates = state_.compiled.model_updates;
    for (size_t u = 0; u < updates.size(); ++u) values_.at(updates[u].variable) = reduced.model_updates[u];
    ++state_.applies;
    result.loss = reduced.loss;
    return result;
  }

  HostVariables& variables() override { return values_; }
  void restore(const HostVariables& values) override { values_ = values; }
  void list_programs(const AddProgram& add) const override {
    add(apply_->name(), "once per step, on the reduced gradients of the variables no rule names",
        apply_->lowered_graph(), apply_->program());
    for (const Own& o : own_)
      add(o.apply->name(), "after each tower's step, on its own gradient of a variable a rule names",
          o.apply->lowered_graph(), o.apply->program());
  }

 private:
  struct Own {
    size_t variable;
    std::unique_ptr<CpuProgram> apply;
  };

  // A tower's gradients of the rules' variables, each applied by its own program times the
  // rule's factor; then emptied, so the Reducer passes over them.
  void apply_own(TowerOutputs& out, const std::vector<int64_t>& slices, uint64_t key) {
    const CompiledTowers& c = state_.compiled;
    for (const Own& o : own_) {
      const double s = reduction_weights(slices, state_.towers.rules()[rule_of_[o.variable]].reduction)[0];
      HostTensor& g = out.gradient(o.variable);
      HostFeeds feeds;
      if (c.is_sparse(o.variable)) {
        size_t k = 0;
        while (c.sparse[k].variable != o.variable) ++k;
        HostTensor values = g;
        for (float& x : values.f32) x = static_cast<float>(s * x);
        feeds[split_.variables[o.variable].gradient_input] = std::move(values);
        feeds[c.sparse[k].rows_input] = out.rows(k);
        feeds[TowerProgram::gradient_scale] = scalar(1.0);
        out.rows(k) = HostTensor(Shape{0});
      } else {
        feeds[split_.variables[o.variable].gradient_input] = g;
        feeds[TowerProgram::gradient_scale] = scalar(s);
      }
      o.apply->run(feeds, values_, key);
      g = HostTensor(Shape{0});
    }
  }

  HostVariables values_;               // the one copy, in host memory
  std::vector<HostVariables> reads_;   // each tower's copy of it for the step
  Reducer reducer_;
  ApplyByVariable split_;
  std::vector<int> rule_of_;           // per trainable variable: its rule, or -1
  std::vector<Own> own_;               // the rules' variables' applies
  std::unique_ptr<CpuProgram> apply_;  // the rest's, and the global step's
};

}  // namespace

std::unique_ptr<TowerStrategy> make_sync_async_by_variable(TowerState& state, Loc loc) {
  return std::make_unique<SyncAsyncByVariable>(state, loc);
}

}  // namespace towerjit::detail
