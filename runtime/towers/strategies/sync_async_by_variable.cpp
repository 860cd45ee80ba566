// Per-variable reductions (Towers::with): the variables an AsyncApply rule names are applied
// from each tower's own gradient (s g_i, s = 1/N with scale_gradient), one apply at a time;
// the rest are reduced as the towers declare (the Reducer: sync average, per-tower mean or
// sum) and applied once per step, with the global step's increment. The recommender layout:
// an embedding's sparse rows pushed as they come, the dense layers averaged. The variables
// live in host memory, one copy a process, which the rules' applies write while other towers
// may still run, so each tower reads a copy of its own, refreshed at the start of every step.
//   - In one process a tower's applies run as soon as it has run, under the apply lock, in the
//     order the towers finish.
//   - Across processes every rank applies every world tower's gradients of the rules'
//     variables, in world tower order, after an all-gather of them (each rank's towers' rows
//     and values, with their sizes): the ranks' copies stay equal, and the order is the same
//     on every rank and for any split of the towers into processes.
#include <algorithm>
#include <cstring>
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
          << "(an embedding's, sparse = true, with an optimiser that applies rows) or dense ones "
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
        reducer_(state, state.options.deterministic_layout, static_cast<int64_t>(state.options.bucket_mb * (1 << 20))) {
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
      int rows = -1;
      for (size_t k = 0; k < c.sparse.size(); ++k)
        if (c.sparse[k].variable == v) rows = static_cast<int>(k);
      own_.push_back({v, rows, std::make_unique<CpuProgram>(c.apply_side->graph, c.apply_fetches, a.updates, nullptr,
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
    const bool alone = state_.world->size() == 1;
    state_.on_tower_threads(split.own, [&](int t) {
      outputs[t] = state_.run_tower(t, split, reads_[t]);
      if (!alone) return;
      const std::lock_guard<std::mutex> lock(state_.apply_mutex);
      apply_own(own_gradients(outputs[t]), split.slices, key);
      empty_own(outputs[t]);
    });
    if (!alone) apply_world(outputs, split.slices, key);
    StepResult result;
    result.slices = split.slices;
    Reduced reduced = reducer_.reduce(std::move(outputs), split.weights, split.shares, loc);
    result.learning_rate = state_.applied(apply_->run(reduced.gradients, values_, key));
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
    int rows;  // its index in CompiledTowers::sparse, or -1 (a dense gradient)
    std::unique_ptr<CpuProgram> apply;
  };

  // A tower's gradients of the rules' variables, in `own_`'s order: for each, the gradient
  // (a sparse one's values), then a sparse one's rows.
  std::vector<HostTensor> own_gradients(const TowerOutputs& out) const {
    std::vector<HostTensor> g;
    for (const Own& o : own_) {
      g.push_back(out.gradient(o.variable));
      if (o.rows >= 0) g.push_back(out.rows(static_cast<size_t>(o.rows)));
    }
    return g;
  }
  // Empties them in the tower's outputs, so the Reducer passes over them.
  void empty_own(TowerOutputs& out) const {
    for (const Own& o : own_) {
      out.gradient(o.variable) = HostTensor(Shape{0});
      if (o.rows >= 0) out.rows(static_cast<size_t>(o.rows)) = HostTensor(Shape{0});
    }
  }

  // One tower's gradients (own_gradients' layout), each applied by its own program times the
  // rule's factor.
  void apply_own(std::vector<HostTensor> g, const std::vector<int64_t>& slices, uint64_t key) {
    const CompiledTowers& c = state_.compiled;
    size_t at = 0;
    for (const Own& o : own_) {
      const double s = reduction_weights(slices, state_.towers.rules()[rule_of_[o.variable]].reduction)[0];
      HostFeeds feeds;
      HostTensor& gradient = g[at++];
      if (o.rows >= 0) {
        for (float& x : gradient.f32) x = static_cast<float>(s * x);
        feeds[c.sparse[static_cast<size_t>(o.rows)].rows_input] = std::move(g[at++]);
        feeds[TowerProgram::gradient_scale] = scalar(1.0);
      } else {
        feeds[TowerProgram::gradient_scale] = scalar(s);
      }
      feeds[split_.variables[o.variable].gradient_input] = std::move(gradient);
      o.apply->run(feeds, values_, key);
    }
  }

  // Across processes: every world tower's gradients of the rules' variables, all-gathered
  // (each tensor as its leading size and its elements; the other axes are the same on every
  // rank), applied in world tower order on every rank.
  void apply_world(std::vector<TowerOutputs>& outputs, const std::vector<int64_t>& slices, uint64_t key) {
    std::vector<char> mine;
    auto put = [&mine](const void* p, size_t bytes) {
      const char* c = static_cast<const char*>(p);
      mine.insert(mine.end(), c, c + bytes);
    };
    std::vector<HostTensor> like;
    for (TowerOutputs& out : outputs) {
      like = own_gradients(out);
      for (const HostTensor& t : like) {
        const int64_t lead = t.shape.rank() > 0 ? t.shape[0] : 1;
        put(&lead, sizeof lead);
        put(t.data(), static_cast<size_t>(t.size()) * 4);
      }
      empty_own(out);
    }
    const std::vector<std::vector<char>> all = state_.world->all_gather(mine);
    for (const std::vector<char>& rank : all)
      for (const char* from = rank.data(); from < rank.data() + rank.size();) {
        std::vector<HostTensor> tower;
        for (const HostTensor& l : like) {
          int64_t lead = 0;
          std::memcpy(&lead, from, sizeof lead);
          from += sizeof lead;
          Shape shape = l.shape;
          if (shape.rank() > 0) shape[0] = lead;
          HostTensor& t = tower.emplace_back(shape, l.dtype);
          std::memcpy(t.data(), from, static_cast<size_t>(t.size()) * 4);
          from += t.size() * 4;
        }
        apply_own(std::move(tower), slices, key);
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
