// Asynchronous towers in one process (the seed's AsyncMultiGPUBuilder): one copy of the
// variables; each tower computes its gradients from the variables as they are and applies them
// itself (scaled by 1/N with scale_gradient), one apply at a time under the apply lock, with no
// barrier between towers. step() waits for every tower's apply of the batch; run_async() and
// fit() let several towers run free (runtime/towers/async_towers.h). Where the variables live
// and where they are applied is an AsyncVariables (runtime/towers/async_variables.h): host
// memory (async_local), or each variable on a GPU by the seed's rule (async_placed).
#include <algorithm>
#include <deque>

#include "dsl/error.h"
#include "runtime/towers/async_towers.h"
#include "runtime/towers/async_variables.h"
#include "runtime/towers/fit_loop.h"
#include "runtime/towers/tower_strategy.h"

namespace towerjit::detail {
namespace {

class AsyncLocal final : public TowerStrategy {
 public:
  AsyncLocal(TowerState& state, std::unique_ptr<AsyncVariables> variables)
      : TowerStrategy(state), variables_(std::move(variables)) {}

  StepResult step(const HostFeeds& batch, int64_t whole_batch, Loc loc) override {
    const BatchSplit split = split_step_batch(batch, whole_batch, state_.towers, state_.layout, loc);
    std::vector<OwnApply> own(split.own);
    // A tower applies as soon as its gradient is ready.
    state_.on_tower_threads(split.own, [&](int t) {
      state_.on_slice(split, t, [&] { own[t] = compute_and_apply(t, split.feeds[t], split.weight(t)); });
    });
    StepResult result;
    result.slices = split.slices;
    const auto last = std::max_element(own.begin(), own.end(),
                                       [](const OwnApply& a, const OwnApply& b) { return a.applied_at < b.applied_at; });
    result.learning_rate = last->learning_rate;
    for (int t = 0; t < split.own; ++t) result.loss += split.share(t) * own[t].loss;
    return result;
  }

  AsyncReport run_async(int steps_per_tower, const BatchFor& batch_for, Loc) override {
    AsyncTowers engine = towers();
    const int n = state_.towers.size();
    // Steps are queued as the towers take them, at most `window` per tower ahead.
    const int64_t window = AsyncTowers::window(state_.towers.reduction());
    for (int s = 0; s < steps_per_tower; ++s) {
      for (int t = 0; t < n; ++t) engine.submit(t, batch_for(t, s), s);
      while (engine.outstanding() > window * n) engine.next_done();
    }
    while (engine.outstanding() > 0) engine.next_done();
    return engine.report();
  }

  void fit(FitLoop& loop, int accumulate, Loc loc) override {
    if (state_.towers.size() == 1) return TowerStrategy::fit(loop, accumulate, loc);
    fit_free(loop, loc);
  }
  bool applies_each_gradient() const override { return true; }

  HostVariables& variables() override { return variables_->host(); }
  void restore(const HostVariables& values) override { variables_->restore(values); }
  std::map<std::string, std::vector<Device>> variable_devices() const override { return variables_->devices(); }
  void list_programs(const AddProgram& add) const override { variables_->list_programs(add); }

 private:
  AsyncTowers towers() {
    return AsyncTowers(state_, [this](int t, const HostFeeds& feeds, double scale) {
      return compute_and_apply(t, feeds, scale);
    });
  }

  // Tower `tower`'s gradients on `feeds` from the variables as they are now, then its own apply
  // of them times `scale`; the model's updates take this tower's values.
  OwnApply compute_and_apply(int tower, const HostFeeds& feeds, double scale) {
    report::Trace::Span compute = state_.traced("forward+backward", "compute", tower);
    compute.arg("examples", feeds.begin()->second.shape[0]);
    const AsyncVariables::Read read = variables_->compute(tower, feeds);
    compute.end();
    std::lock_guard lock(state_.apply_mutex);
    OwnApply result{.loss = read.loss, .staleness = state_.applies - read.read_at, .applied_at = state_.applies};
    report::Trace::Span span = state_.traced("apply", "apply", tower);
    span.arg("staleness", result.staleness);
    state_.count_async_apply(result.staleness);
    result.learning_rate = variables_->apply(tower, scale);
    ++state_.applies;
    return result;
  }

  // Async towers running free: each tower takes its slice of batch after batch from its own
  // queue, up to AsyncTowers::window() batches ahead of the slowest, while this thread reads the
  // pipeline and reports each batch once every tower has applied its slice. A step whose hooks
  // use the trainer (an evaluation, a checkpoint) is a quiet point: no later batch is handed
  // out until those hooks return, so they see exactly the applies of the batches before.
  void fit_free(FitLoop& loop, Loc loc) {
    struct InFlight {
      StepEvent event;
      HostFeeds feeds;             // the whole batch, for the NaN check's message
      std::vector<double> shares;  // n_i / B: the batch's loss is the slices' weighted sum
      Clock::time_point submitted;
      int towers_left = 0;
      bool quiet = false;
    };
    AsyncTowers engine = towers();
    const int n = state_.towers.size();
    const int64_t window = AsyncTowers::window(state_.towers.reduction());
    std::deque<InFlight> in_flight;
    while (true) {
      const bool can_submit = !loop.done() && static_cast<int64_t>(in_flight.size()) < window &&
                              (in_flight.empty() || !in_flight.back().quiet);
      if (can_submit) {
        auto [batch, event] = loop.next();
        const std::vector<int64_t> slices = state_.towers.slices(event.examples, loc);
        InFlight f{.event = event, .shares = slice_shares(slices, event.examples), .submitted = Clock::now(),
                   .towers_left = n, .quiet = loop.hooks_use_trainer(event)};
        std::vector<HostFeeds> feeds = cut_batch(batch.feeds, slices, loc);
        for (int t = 0; t < n; ++t) engine.submit(t, std::move(feeds[t]), event.step);
        f.feeds = std::move(batch.feeds);  // the slices are copies
        in_flight.push_back(std::move(f));
        continue;
      }
      if (in_flight.empty()) return;
      const AsyncTowers::Done d = engine.next_done();
      InFlight& f = in_flight[d.tag - in_flight.front().event.step];
      f.event.loss += f.shares[d.tower] * d.loss;
      f.event.learning_rate = d.learning_rate;  // the batch's last apply
      --f.towers_left;
      // Batches are reported in order, each once all its slices are applied.
      while (!in_flight.empty() && in_flight.front().towers_left == 0) {
        std::vector<Suspect> suspects;
        for (const InFlight& g : in_flight) suspects.push_back({g.event.step, &g.feeds});
        InFlight& ready = in_flight.front();
        ready.event.seconds = seconds_since(ready.submitted);
        loop.trained(ready.event, suspects);
        in_flight.pop_front();
      }
    }
  }

  std::unique_ptr<AsyncVariables> variables_;
};

}  // namespace

std::unique_ptr<TowerStrategy> make_async_local(TowerState& state, Loc) {
  return std::make_unique<AsyncLocal>(state, host_async_variables(state));
}
std::unique_ptr<TowerStrategy> make_async_placed(TowerState& state, Loc loc) {
  return std::make_unique<AsyncLocal>(state, placed_async_variables(state, loc));
}

}  // namespace towerjit::detail
