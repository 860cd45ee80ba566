// Asynchronous towers across processes: rank 0 is a parameter server (its towers stay idle)
// that applies every push exactly once; the other ranks' towers push their gradients to it and
// take back the variables (the messages: runtime/towers/async_world.h). They train through
// fit() only: the server reads the same batches as the workers to report each to the hooks.
#include <deque>
#include <limits>
#include <optional>

#include "dsl/error.h"
#include "runtime/towers/async_world.h"
#include "runtime/towers/fit_loop.h"
#include "runtime/towers/tower_strategy.h"

namespace towerjit::detail {
namespace {

// What the server and its workers share: one copy of the variables, fit() only.
class AcrossProcesses : public TowerStrategy {
 public:
  explicit AcrossProcesses(TowerState& state)
      : TowerStrategy(state), values_(state.compiled.initial), apply_(state.compiled.make_apply()) {}

  StepResult step(const HostFeeds&, int64_t, Loc loc) override {
    user_check(false, loc) << dist::rank_prefix() << "step: async towers across processes train through "
                           << "fit(), which runs the parameter server on rank 0; call fit()";
    std::abort();  // not reached
  }
  AsyncReport run_async(int, const BatchFor&, Loc loc) override {
    user_check(false, loc) << dist::rank_prefix() << "run_async: async towers across processes train "
                           << "through fit(); call fit()";
    std::abort();  // not reached
  }
  // The server and its workers have no common step to stop after (mpirun ends them all).
  bool stops_on_signals() const override { return false; }
  bool applies_each_gradient() const override { return true; }
  HostVariables& variables() override { return values_; }
  void restore(const HostVariables& values) override { values_ = values; }

  void list_programs(const AddProgram& add) const override {
    add(apply_->name(), "after each tower's step, on its own gradients", apply_->lowered_graph(), apply_->program());
  }

 protected:
  HostVariables values_;
  std::unique_ptr<CpuProgram> apply_;  // the server's; the workers' is never run
};

// The parameter server's side: applies every push as it comes, and reports each batch to the
// hooks, in order, once every world tower's slice of it is applied. While a batch whose hooks
// use the trainer is unfinished, pushes of later batches wait (received, not applied), so those
// hooks see exactly the applies of the batches before it; so do pushes of a tower past the
// staleness bound. The slowest tower's next push is always for the earliest unfinished batch
// and always within the bound, so something can always be applied.
class Server final : public AcrossProcesses {
 public:
  using AcrossProcesses::AcrossProcesses;

  void fit(FitLoop& loop, int, Loc loc) override {
    struct Pending {
      StepEvent event;
      std::vector<double> shares;  // n_i / B over the world's towers
      int towers_left = 0;
      bool quiet = false;
    };
    AsyncServer server(state_, values_, *apply_);
    const int towers = state_.layout.towers();
    std::deque<Pending> pending;  // batches handed out and not yet reported, in order
    std::deque<AsyncServer::Push> held;
    int64_t last_created = -1;
    auto create_through = [&](int64_t step) {
      while (last_created < step) {
        internal_check(!loop.done());  // every rank reads the same batches
        auto [batch, event] = loop.next();
        const std::vector<int64_t> slices = split_batch(event.examples, towers, state_.towers.split_policy(), loc);
        Pending p{.event = event, .shares = slice_shares(slices, event.examples), .towers_left = towers,
                  .quiet = loop.hooks_use_trainer(event)};
        last_created = event.step;
        pending.push_back(std::move(p));
      }
    };
    // The first unfinished batch whose hooks use the trainer: no later push is applied before it.
    auto barrier = [&] {
      for (const Pending& p : pending)
        if (p.quiet) return p.event.step;
      return std::numeric_limits<int64_t>::max();
    };
    while (!(pending.empty() && loop.done())) {
      // The first held push that may go now, else the next from the network (held in turn
      // if it may not: a later batch than a quiet one, or a tower past the staleness bound).
      std::optional<AsyncServer::Push> push;
      for (auto it = held.begin(); it != held.end(); ++it)
        if (it->step <= barrier() && server.may_apply(*it)) {
          push = std::move(*it);
          held.erase(it);
          break;
        }
      if (!push) {
        push = server.receive(loc);
        create_through(push->step);
        if (push->step > barrier() || !server.may_apply(*push)) {
          held.push_back(std::move(*push));
          continue;
        }
      }
      const AsyncServer::Applied a = server.apply(std::move(*push), loc);
      Pending& p = pending[a.step - pending.front().event.step];
      p.event.loss += p.shares[a.tower] * a.loss;
      p.event.learning_rate = a.learning_rate;
      --p.towers_left;
      while (!pending.empty() && pending.front().towers_left == 0) {
        loop.trained(pending.front().event, {});
        pending.pop_front();
      }
    }
  }
};

// A worker's side: its towers' rows of every batch, pushed to the parameter server tower by
// tower. The server reports.
class Worker final : public AcrossProcesses {
 public:
  using AcrossProcesses::AcrossProcesses;
  void fit(FitLoop& loop, int, Loc loc) override {
    AsyncWorker worker(state_, values_);
    while (!loop.done()) {
      auto [batch, event] = loop.next();
      worker.work(event.step, batch.feeds, event.examples, loc);
    }
  }
};

}  // namespace

std::unique_ptr<TowerStrategy> make_async_server(TowerState& state, Loc) { return std::make_unique<Server>(state); }
std::unique_ptr<TowerStrategy> make_async_worker(TowerState& state, Loc) { return std::make_unique<Worker>(state); }

}  // namespace towerjit::detail
