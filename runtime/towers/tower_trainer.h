// Training over CPU towers: each tower runs the same compiled forward and backward program on
// its slice of the batch, on a thread of its own; then the strategy decides how the gradients
// reach the shared variables.
//   sync (SyncAverage, SyncPerTowerMean, SyncSum): the towers' gradients are combined with
//     reduction_weights() in a fixed tower order (bitwise reproducible), and one compiled
//     optimiser apply runs once per step.
//   async (AsyncApply): each tower applies its own (scaled) gradient as soon as it has it; an
//     apply is one critical section, so no apply is torn or lost, but towers read whatever
//     the variables hold when they start.
// The batch is symbolic in the programs, so uneven slices (7 and 8 of 15) share one compiled
// program. GPU towers need the CUDA runtime, which is not built yet.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "dsl/optimizers.h"
#include "dsl/towers.h"
#include "runtime/cpu/cpu_program.h"
#include "runtime/thread_pool.h"

namespace towerjit {

struct TowerTrainerOptions {
  uint64_t seed = 1;  // initial variable values
};

class TowerTrainer {
 public:
  // `graph` holds the model; `loss` is an f32 scalar, the mean over the batch of the inputs
  // (every input's first dimension is the batch). The trainer adds the gradients and the
  // optimiser's apply to the graph and compiles them. The model's own update ops (batch
  // norm's moving averages) run in every tower on its slice; sync towers then write their
  // slice-weighted average (a moving mean follows the whole batch's mean), async towers each
  // write their own. Errors (towerjit::Error): GPU towers, a trainable variable the loss does
  // not depend on.
  TowerTrainer(Graph& graph, Tensor loss, Towers towers, const Optimizer& optimizer,
               TowerTrainerOptions options = {}, Loc loc = Loc::current());
  ~TowerTrainer();

  struct StepResult {
    double loss = 0;  // the batch's mean loss: sum over towers of (n_i / B) * loss_i
    std::vector<int64_t> slices;
  };
  // One training step on a batch (every input fed with the whole batch). Errors: inputs that
  // disagree on the batch size, more towers than examples.
  StepResult step(const HostFeeds& batch, Loc loc = Loc::current());

  // Async towers running free: each tower takes `steps_per_tower` steps on its own batches
  // (batch_for(tower, step) gives tower `tower`'s slice for its step `step`), applying after
  // each, with no barrier. With AsyncApply::max_staleness = k, a tower that has applied more
  // than k times more than the slowest tower waits for it. Errors: a sync strategy.
  struct AsyncReport {
    int64_t applies = 0;
    int64_t max_lead = 0;       // the most applies a tower was ahead of the slowest when applying
    int64_t max_staleness = 0;  // the most applies by others between a tower's read and its apply
    double mean_staleness = 0;
  };
  AsyncReport run_async(int steps_per_tower, const std::function<HostFeeds(int tower, int step)>& batch_for,
                        Loc loc = Loc::current());

  HostVariables& variables() { return variables_; }
  const Towers& towers() const { return towers_; }
  int64_t applies() const { return applies_; }  // optimiser applies so far

 private:
  std::vector<HostFeeds> slice_batch(const HostFeeds& batch, const std::vector<int64_t>& slices,
                                     Loc loc) const;
  void apply(const std::vector<std::vector<HostTensor>>& outputs, const std::vector<double>& weights,
             const std::vector<int>& towers);
  void write_model_updates(const std::vector<std::vector<HostTensor>>& outputs,
                           const std::vector<double>& weights, const std::vector<int>& towers);

  struct ModelUpdate {
    std::string variable;  // e.g. "bn1/moving_mean"
    Tensor value;          // its next value, computed by a tower from its slice
  };
  std::vector<ModelUpdate> model_updates_;

  Towers towers_;
  std::vector<Tensor> variables_in_order_;
  std::vector<std::string> gradient_inputs_;
  std::vector<std::unique_ptr<CpuProgram>> tower_programs_;  // one per tower: run() is not reentrant
  std::unique_ptr<CpuProgram> apply_program_;
  HostVariables variables_;
  ThreadPool threads_;
  std::mutex apply_mutex_;
  std::atomic<int64_t> applies_ = 0;
};

}  // namespace towerjit
