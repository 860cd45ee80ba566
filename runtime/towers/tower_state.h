// What every tower strategy shares, owned by the TowerTrainer facade: the towers and where
// they sit in the world, the compiled programs, the tower threads, the apply count and its
// lock, the async staleness accounting and the trace. Strategies (runtime/towers/strategies/)
// hold a reference to it; nothing here knows which strategy runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "runtime/dist/world.h"
#include "runtime/report/trace.h"
#include "runtime/thread_pool.h"
#include "runtime/towers/batch_split.h"
#include "runtime/towers/compile_towers.h"
#include "runtime/towers/tower_trainer.h"

namespace towerjit::detail {

// Trace rows: towers 0..N-1, then the reduction, then each copy's apply.
inline constexpr int kReduceRow = 1000;
inline constexpr int kApplyRow = 1001;

// The towers' random-number key (dropout masks) for world tower `tower` reading the variables
// after `applies` applies, in micro-batch `micro` of an accumulated step: masks differ between
// towers, steps and micro-batches, and repeat on a resumed run; keyed by the world's tower
// index, so a tower draws the same masks in whichever process it runs. The one formula.
uint64_t random_key(int64_t applies, int tower, int micro = 0);

// A tower step's fetches, by name: the loss, each gradient, each model update's new value,
// then the rows of each sparse gradient (CompiledTowers::sparse; its values are its gradient).
class TowerOutputs {
 public:
  TowerOutputs() = default;
  TowerOutputs(std::vector<HostTensor> fetched, size_t gradients, size_t sparse = 0)
      : fetched_(std::move(fetched)), gradients_(gradients), sparse_(sparse) {}
  double loss() const { return fetched_.at(0).f32[0]; }
  HostTensor& gradient(size_t v) { return fetched_.at(1 + v); }
  const HostTensor& gradient(size_t v) const { return fetched_.at(1 + v); }
  HostTensor& update(size_t u) { return fetched_.at(1 + gradients_ + u); }
  const HostTensor& update(size_t u) const { return fetched_.at(1 + gradients_ + u); }
  size_t gradients() const { return gradients_; }
  size_t updates() const { return fetched_.size() - 1 - gradients_ - sparse_; }
  // The k-th sparse gradient's rows (i32).
  HostTensor& rows(size_t k) { return fetched_.at(fetched_.size() - sparse_ + k); }
  const HostTensor& rows(size_t k) const { return fetched_.at(fetched_.size() - sparse_ + k); }
  size_t sparse() const { return sparse_; }
  // Every fetch in order (loss, gradients, updates, rows): what a gather packs.
  std::vector<HostTensor>& all() { return fetched_; }
  const std::vector<HostTensor>& all() const { return fetched_; }

 private:
  std::vector<HostTensor> fetched_;
  size_t gradients_ = 0;
  size_t sparse_ = 0;
};

// The staleness a set of async applies saw, accumulated: the one place it is counted (the
// trainer keeps one over its life, AsyncTowers one per run).
struct StalenessLog {
  TowerTrainer::AsyncReport report;
  int64_t sum = 0;
  void add(int64_t staleness);
  TowerTrainer::AsyncReport summary() const;  // the report, its mean filled in
};

class TowerState {
 public:
  using AsyncReport = TowerTrainer::AsyncReport;
  // `runs_towers`: false on a rank whose strategy runs none (the parameter server).
  TowerState(Towers towers, dist::Transport& world, bool runs_towers, Loc loc);

  const Towers towers;
  dist::Transport* const world;
  const dist::WorldLayout layout;
  const std::vector<std::vector<int>> tower_cores;  // each CPU tower's cores (none for GPU towers)
  const bool pinned;                                // TOWERJIT_PIN_TOWERS
  std::vector<std::unique_ptr<ThreadPool>> tower_pools;  // a CPU tower's own threads, when it has several cores
  CompiledTowers compiled;
  TowerStrategyOptions options;  // as resolved: the trainer's, the environment's overrides applied
  std::atomic<int64_t> applies = 0;  // optimiser applies so far
  mutable std::mutex apply_mutex;    // one apply at a time (async towers)
  report::Trace* trace = nullptr;

  // Tower t's work on its thread (pinned to the tower's cores); the caller's thread runs tower
  // 0's, pinned to tower 0's cores meanwhile.
  void on_tower_threads(int count, const std::function<void(int)>& body);
  ThreadPool& threads() { return threads_; }
  report::Trace::Span traced(std::string_view name, std::string_view category, int row);

  // Tower t's step on its slice of `split` from `values`: its outputs by name. An error naming
  // an example (an out-of-range label) counts from the slice's start; the message then says
  // which rows of the batch the tower ran.
  TowerOutputs run_tower(int t, const BatchSplit& split, HostVariables& values);
  // Runs `body` for this process's tower t of `split`, relabelling its errors as above.
  void on_slice(const BatchSplit& split, int t, const std::function<void()>& body);
  // Tower t's step on `feeds`, keyed by `key` (random_key).
  TowerOutputs run_tower(int t, const HostFeeds& feeds, HostVariables& values, uint64_t key);

  // The staleness accounting of async applies, in one place. Under apply_mutex: an apply with
  // `staleness` (applies by others between its read and its apply).
  void count_async_apply(int64_t staleness);
  // A free-running tower's lead over the slowest (any lock).
  void count_lead(int64_t lead);
  AsyncReport async_report() const;

  // What an apply fetched (CompiledTowers::apply_fetches): returns the learning rate; with loss
  // scaling, keeps the scale and the skipped steps for loss_scale() and the trace. Any thread.
  double applied(const std::vector<HostTensor>& fetched);
  std::optional<TowerTrainer::LossScaleReport> loss_scale() const;

 private:
  ThreadPool threads_;
  StalenessLog so_far_;  // every async apply since the trainer was built; under apply_mutex
  std::atomic<double> loss_scale_ = std::numeric_limits<double>::quiet_NaN();  // NaN: no loss scaling
  std::atomic<int64_t> skipped_steps_ = 0;
};

}  // namespace towerjit::detail
