// Synchronous towers with the variables in host memory: every tower runs its slice from its
// copy of the variables, the Reducer (runtime/towers/reducer.h) forms the weighted sum of the
// gradients (across processes too), and each copy applies it once. Replicated: one copy per
// tower, all applying the same sum (they stay bitwise equal); one copy (the parameter_server
// variant): the optimiser applies once and every tower reads it. GPU towers of this strategy
// upload the variables every step and the CPU reduces and applies: the seed's placement of the
// variables on the CPU.
#include <algorithm>

#include "dsl/error.h"
#include "runtime/towers/reducer.h"
#include "runtime/towers/tower_strategy.h"

namespace towerjit::detail {
namespace {

class SyncHost final : public TowerStrategy {
 public:
  SyncHost(TowerState& state, int copies)
      : TowerStrategy(state),
        copies_(copies, state.compiled.initial),
        reducer_(state, state.options.deterministic_layout,
                 static_cast<int64_t>(state.options.bucket_mb * (1 << 20))) {
    for (int r = 0; r < copies; ++r) apply_.push_back(state.compiled.make_apply());
  }

  StepResult step(const HostFeeds& batch, int64_t whole_batch, Loc loc) override {
    BatchSplit split = split_step_batch(batch, whole_batch, state_.towers, state_.layout, loc);
    std::vector<TowerOutputs> outputs(split.own);
    state_.on_tower_threads(split.own, [&](int t) { outputs[t] = state_.run_tower(t, split, copy_of(t)); });
    StepResult result;
    result.slices = split.slices;
    report::Trace::Span reduce = state_.traced("all-reduce", "communication", kReduceRow);
    Reduced reduced = reducer_.reduce(std::move(outputs), split.weights, split.shares, loc);
    reduce.end();
    apply(reduced, result);
    last_ = std::move(reduced);  // kept, not copied: the step's reduction is made anew each step
    return result;
  }

  // Each micro-batch is split over the towers and run as a step's slices are; every
  // (micro-batch, tower) pair then counts as one tower of a step on the whole batch, weighted
  // by its examples: exact where the reduction weighs examples, in one process.
  StepResult accumulated_step(const HostFeeds& batch, int micro, Loc loc) override {
    if (!weighs_examples(state_.towers.reduction()) || state_.world->size() > 1) no_accumulation(micro, loc);
    user_check(!batch.empty() && batch.begin()->second.shape.rank() > 0, loc)
        << "step: no batched inputs fed; feed the model's inputs with the batch";
    const int64_t examples = batch.begin()->second.shape[0];
    for (const auto& [name, t] : batch)
      user_check(t.shape.rank() > 0 && t.shape[0] == examples, loc)
          << "step: input \"" << name << "\" has " << count_of(t.shape.rank() ? t.shape[0] : 0, "example")
          << " but \"" << batch.begin()->first << "\" has " << examples << "; feed every input the same batch";
    const int n = state_.towers.size();
    user_check(examples >= micro * static_cast<int64_t>(n), loc)
        << "step: " << count_of(examples, "example") << " cannot make " << micro << " micro-batches for "
        << count_of(n, "tower") << "; feed at least " << micro * n << " examples";
    const std::vector<int64_t> parts = split_batch(examples, micro, Split::balanced, loc);
    std::vector<TowerOutputs> outputs;
    std::vector<int64_t> slices_all;
    StepResult result;
    result.slices.assign(n, 0);
    int64_t start = 0;
    for (int m = 0; m < micro; ++m) {
      HostFeeds part;
      for (const auto& [name, t] : batch) part[name] = rows_of(t, start, parts[m]);
      start += parts[m];
      const std::vector<int64_t> slices = state_.towers.slices(parts[m], loc);
      const std::vector<HostFeeds> feeds = cut_batch(part, slices, loc);
      std::vector<TowerOutputs> out(n);
      state_.on_tower_threads(n, [&](int t) {
        out[t] = state_.run_tower(t, feeds[t], copy_of(t), random_key(state_.applies, t, m));
      });
      for (int t = 0; t < n; ++t) {
        outputs.push_back(std::move(out[t]));
        slices_all.push_back(slices[t]);
        result.slices[t] += slices[t];
      }
    }
    const std::vector<double> shares = slice_shares(slices_all, examples);
    report::Trace::Span reduce = state_.traced("all-reduce", "communication", kReduceRow);
    Reduced reduced = reducer_.reduce(std::move(outputs), shares, shares, loc);
    reduce.end();
    apply(reduced, result);
    last_ = std::move(reduced);
    return result;
  }

  HostVariables& variables() override { return copies_[0]; }
  void restore(const HostVariables& values) override {
    for (HostVariables& copy : copies_) copy = values;
  }
  void list_programs(const AddProgram& add) const override {
    add(apply_[0]->name(), "once per step per copy of the variables, on the reduced gradients",
        apply_[0]->lowered_graph(), apply_[0]->program());
  }
  void name_trace_rows(report::Trace& trace) const override {
    for (size_t r = 0; r < copies_.size(); ++r)
      trace.name_thread(kApplyRow + static_cast<int>(r),
                        copies_.size() > 1 ? "apply, replica " + std::to_string(r) : "apply");
  }

 private:
  HostVariables& copy_of(int tower) { return copies_[std::min<size_t>(tower, copies_.size() - 1)]; }

  // Every copy applies the same reduction; the model's updates replace their variables.
  void apply(const Reduced& reduced, StepResult& result) {
    const int copies = static_cast<int>(copies_.size());
    std::vector<double> rates(copies);
    const auto& updates = state_.compiled.model_updates;
    state_.on_tower_threads(copies, [&](int r) {
      report::Trace::Span span = state_.traced("apply", "apply", kApplyRow + r);
      const std::vector<HostTensor> fetched = apply_[r]->run(reduced.gradients, copies_[r], static_cast<uint64_t>(state_.applies));
      rates[r] = r == 0 ? state_.applied(fetched) : fetched[0].f32[0];  // every copy applies the same: one reports
      for (size_t u = 0; u < updates.size(); ++u) copies_[r].at(updates[u].variable) = reduced.model_updates[u];
    });
    result.learning_rate = rates[0];
    ++state_.applies;
    result.loss = reduced.loss;
  }

  const HostFeeds* last_gradients() const override { return last_.gradients.empty() ? nullptr : &last_.gradients; }

  std::vector<HostVariables> copies_;
  std::vector<std::unique_ptr<CpuProgram>> apply_;  // one per copy
  Reducer reducer_;
  Reduced last_;  // the last step's reduction, for last_gradients()
};

}  // namespace

std::unique_ptr<TowerStrategy> make_sync_host_replicated(TowerState& state, Loc) {
  return std::make_unique<SyncHost>(state, state.towers.size());
}
std::unique_ptr<TowerStrategy> make_sync_host_one_copy(TowerState& state, Loc) {
  return std::make_unique<SyncHost>(state, 1);
}

}  // namespace towerjit::detail
