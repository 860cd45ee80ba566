// Training over CPU towers: each tower runs the same compiled forward and backward program on
// its slice of the batch, on a thread of its own pinned to cores of its own (the process's
// cores shared out among the CPU towers; a tower with several splits its loops and products
// over them); then the strategy decides how the gradients reach the variables.
//   sync (SyncAverage, SyncPerTowerMean, SyncSum): the towers' gradients are combined with
//     reduction_weights() by an in-process all-reduce in a fixed tower order (bitwise
//     reproducible), then
//       replicated: every tower holds its own copy of the variables and applies the reduced
//         gradient to it (the copies stay bitwise equal), or
//       parameter_server: one copy; the optimiser applies once and every tower reads it.
//   async (AsyncApply): each tower applies its own (scaled) gradient as soon as it has it; an
//     apply is one critical section, so no apply is torn or lost, but towers read whatever
//     the variables hold when they start.
// The batch is symbolic in the programs, so uneven slices (7 and 8 of 15) share one compiled
// program. A GPU tower (gpu(i)) runs its program on that GPU (CudaProgram, on a stream of its
// own, so several towers may share a GPU); the variables stay in host memory, uploaded to the
// towers every step, and the all-reduce and the apply run on the CPU: the seed's placement of
// the variables on the CPU. Sync towers that are all GPUs may instead keep the variables on
// the GPUs, reducing (NCCL between GPUs) and applying there: TOWERJIT_GPU_VARIABLES=on,
// runtime/towers/gpu_resident_sync.h.
// Under mpirun (runtime/dist/world.h) `towers` are this process's towers; the world's are every
// process's in rank order, a batch is split over all of them, and a sync step reduces this
// process's towers in-process, then all-reduces across the processes (docs/distributed.md).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "dsl/ema.h"
#include "dsl/optimizers.h"
#include "dsl/tower_program.h"
#include "dsl/towers.h"
#include "runtime/cpu/cpu_program.h"
#include "runtime/device_program.h"
#include "runtime/dist/world.h"
#include "runtime/report/trace.h"
#include "runtime/thread_pool.h"

namespace towerjit {

class GpuResidentSync;


struct TowerTrainerOptions {
  uint64_t seed = 1;  // initial variable values
  // Shadows of the trainable variables, updated after every apply (TF's semantics, dsl/ema.h);
  // predict()/evaluate() can then use them.
  std::optional<ExponentialMovingAverage> ema = std::nullopt;
  // The model's output, for predict() and evaluate() (a [B, classes] f32 tensor). They run
  // the model in inference (dsl/phase.h): batch norm on its moving statistics, no dropout.
  Tensor logits = {};
};

class TowerTrainer {
 public:
  // `graph` holds the model; `loss` is an f32 scalar, the mean over the batch of the inputs
  // (every input's first dimension is the batch). The trainer adds the gradients and the
  // optimiser's apply to the graph and compiles them. The model's own update ops (batch
  // norm's moving averages) run in every tower on its slice; sync towers then write their
  // slice-weighted average (a moving mean follows the whole batch's mean), async towers each
  // write their own. Errors (towerjit::Error): a GPU the machine does not have, a trainable variable the loss does
  // not depend on, a `logits` tensor of another graph.
  TowerTrainer(Graph& graph, Tensor loss, Towers towers, const Optimizer& optimizer,
               TowerTrainerOptions options = {}, Loc loc = Loc::current());
  ~TowerTrainer();

  struct StepResult {
    double loss = 0;  // the batch's mean loss: sum over towers of (n_i / B) * loss_i
    double learning_rate = 0;  // the rate the (last) apply of this step used
    std::vector<int64_t> slices;
  };
  struct StepOptions {
    // A loss that is NaN or infinite is an error (naming the batch's first non-finite input,
    // if any); false: it is returned, as fit() takes it, to say more.
    bool check_loss = true;
    // > 0: `batch` holds only this process's rows (own_rows) of a batch of this many examples,
    // as fit() feeds a pipeline's part. 0: `batch` is the whole batch; in a world of several
    // processes each trains on its own rows of it.
    int64_t whole_batch = 0;
    // Gradient accumulation: the batch is cut into this many micro-batches, run one after the
    // other (each split over the towers), and their gradients combined into one apply: exactly
    // a step on the whole batch, in a micro-batch's memory. SyncAverage towers, one process.
    int accumulate = 1;
  };
  // One training step on a batch (every input fed with the whole batch). Errors: inputs that
  // disagree on the batch size, more towers than examples, a loss that is not finite (the
  // variables then hold the step's update).
  StepResult step(const HostFeeds& batch, Loc loc = Loc::current());
  StepResult step(const HostFeeds& batch, StepOptions options, Loc loc = Loc::current());

  // Async towers running free: each tower takes `steps_per_tower` steps on its own batches
  // (batch_for(tower, step) gives tower `tower`'s slice for its step `step`; called on this
  // thread, a few steps ahead of the towers), applying after each, with no barrier. With
  // AsyncApply::max_staleness = k, a tower that has applied more than k times more than the
  // slowest tower waits for it. Errors: a sync strategy.
  struct AsyncReport {
    int64_t applies = 0;
    int64_t max_lead = 0;       // the most applies a tower was ahead of the slowest when applying
    int64_t max_staleness = 0;  // the most applies by others between a tower's read and its apply
    double mean_staleness = 0;
  };
  // The same over every async apply since the trainer was built (step(), fit(), run_async());
  // max_lead counts free-running towers only (step() has a barrier per batch).
  AsyncReport async_report() const;
  AsyncReport run_async(int steps_per_tower, const std::function<HostFeeds(int tower, int step)>& batch_for,
                        Loc loc = Loc::current());

  // The logits of every example of `inputs` (fed like step()'s batch, without labels being
  // needed): each tower computes its slice, the results are concatenated in tower order.
  // `ema_weights` evaluates with the EMA shadows in place of the trained variables. Errors:
  // no `logits` option, an EMA request without the `ema` option, too few examples.
  HostTensor predict(const HostFeeds& inputs, bool ema_weights = false, Loc loc = Loc::current());

  // Accuracy and mean softmax cross-entropy of predict()'s logits against `labels` (i32, one
  // class per example), over `inputs` taken `chunk` examples at a time.
  struct Evaluation {
    double accuracy = 0;
    double loss = 0;
    int64_t examples = 0;
  };
  Evaluation evaluate(const HostFeeds& inputs, const HostTensor& labels, bool ema_weights = false,
                      int64_t chunk = 2000, Loc loc = Loc::current());

  // The trained values of every variable (model, optimiser slots, EMA shadows, global step):
  // what a checkpoint stores. With replicated sync towers, tower 0's copy (all are equal).
  // With the variables on the GPUs (TOWERJIT_GPU_VARIABLES), the first GPU's copy, fetched
  // when it has changed since the last call.
  HostVariables& variables();
  // Replaces every variable's value (e.g. from a checkpoint) and the apply count. Errors: a
  // variable missing from `values` or with another shape or dtype, an extra variable.
  void restore(const HostVariables& values, int64_t applies, Loc loc = Loc::current());

  const Towers& towers() const { return towers_; }
  // Where this process's towers sit among the world's (one process: all of them).
  const dist::WorldLayout& world_layout() const { return layout_; }
  // Async towers across processes: rank 0 is the parameter server (its towers stay idle), the
  // other ranks' towers push to it (runtime/towers/async_world.h; fit() only).
  bool parameter_server_rank() const { return async_world() && layout_.rank == 0; }
  bool async_world() const { return is_async(towers_.reduction()) && layout_.towers_of_rank.size() > 1; }
  // The rows [first, first + count) of a batch of `batch` examples that this process's towers
  // train on: the world's split, this rank's towers' slices. Errors: more world towers than
  // examples.
  std::pair<int64_t, int64_t> own_rows(int64_t batch, Loc loc = Loc::current()) const;
  // Each program the trainer compiled, once (the towers' copies of one are alike): the tower
  // step, the apply, predict, and with the variables on the GPUs the reductions. Their CUDA:
  // dump_cuda (runtime/towers/dump_programs.h).
  struct ProgramView {
    std::string name;  // its dump stem: "tower_step", "apply", "predict", "reduce", ...
    std::string runs;  // when it runs, in words
    const Graph* graph = nullptr;  // the optimised graph `program` refers to
    const kir::Program* program = nullptr;
  };
  std::vector<ProgramView> programs() const;
  // The cores CPU tower `tower`'s threads run on, pinned unless TOWERJIT_PIN_TOWERS=off (a
  // group of the process's cores of its own while there are as many cores as CPU towers);
  // empty for a GPU tower.
  const std::vector<int>& cores_of(int tower) const { return tower_cores_.at(tower); }
  // `batch` cut into consecutive slices of `slices` examples (every input alike). Errors: a
  // scalar input.
  std::vector<HostFeeds> slice_batch(const HostFeeds& batch, const std::vector<int64_t>& slices,
                                     Loc loc = Loc::current()) const;
  int64_t applies() const { return applies_; }  // optimiser applies so far
  // Spans for each tower's compute, the reduction and the applies go to `trace` (null: off).
  void set_trace(report::Trace* trace);

 private:
  HostFeeds all_reduce(const std::vector<std::vector<HostTensor>>& outputs,
                       const std::vector<double>& weights);
  // Σ_i weights[i] * outputs[i][1 + v] for the gradients v of `which`, in tower order, in
  // double, written to `into[k]` for which[k], split over the tower threads.
  void reduce_gradients(const std::vector<std::vector<HostTensor>>& outputs, const std::vector<double>& weights,
                        const std::vector<int>& which, const std::vector<float*>& into);
  // A sync step's reduction over the world: the reduced gradients (the apply's feeds), the
  // model updates' new values and the batch's loss. `outputs` are this process's towers';
  // `slices` and `weights` the world's. In a world of several processes, this process's sum
  // is all-reduced bucket by bucket (or, under TOWERJIT_DETERMINISTIC=layout, every tower's
  // outputs are gathered and summed in world tower order, as one process would).
  struct Reduced {
    HostFeeds gradients;
    std::vector<HostTensor> model_updates;
    double loss = 0;
  };
  Reduced reduce_over_world(std::vector<std::vector<HostTensor>> outputs, const std::vector<int64_t>& slices,
                            const std::vector<double>& weights, int64_t examples);
  // Applies a reduction on every replica and counts the apply; the step's loss and rate.
  void apply_reduced(const Reduced& reduced, StepResult& result);
  std::vector<std::vector<HostTensor>> gather_towers(const std::vector<std::vector<HostTensor>>& outputs);
  HostFeeds own_gradients(std::vector<HostTensor>& outputs, double weight) const;
  // An async tower's step: its gradients on `feeds` from the shared variables as they are now,
  // then its own apply (gradients times `scale`) under the apply lock.
  struct OwnApply {
    double loss = 0;
    double learning_rate = 0;
    int64_t staleness = 0;   // applies by other towers between its read and its apply
    int64_t applied_at = 0;  // the apply count before this apply
  };
  OwnApply compute_and_apply(int tower, const HostFeeds& feeds, double scale);
  friend class AsyncTowers;
  friend class AsyncServer;
  friend class AsyncWorker;
  double apply(const HostFeeds& gradients, int replica);
  HostTensor predict_with(const HostFeeds& inputs, HostVariables& values, Loc loc);
  HostVariables ema_weights_of(const HostVariables& values) const;
  void write_model_updates(const std::vector<std::vector<HostTensor>>& outputs,
                           const std::vector<double>& weights, const std::vector<int>& towers,
                           HostVariables& target);
  report::Trace::Span traced(std::string_view name, std::string_view category, int row);
  void on_tower_threads(int count, const std::function<void(int)>& body);
  StepResult train_step(const HostFeeds& batch, int64_t whole_batch, Loc loc);  // step() without the loss check
  StepResult accumulated_step(const HostFeeds& batch, int micro, Loc loc);
  StepResult step_on_gpus(const std::vector<HostFeeds>& feeds, StepResult result, const std::vector<double>& weights,
                          int64_t examples);
  bool replicated() const { return replicas_.size() > 1; }
  HostVariables& variables_of(int tower) { return replicas_[replicated() ? tower : 0]; }

  std::vector<TowerProgram::ModelUpdate> model_updates_;

  Towers towers_;
  dist::Transport* world_ = nullptr;  // the processes' transport (in-process when alone)
  dist::WorldLayout layout_;
  bool deterministic_layout_ = false;  // TOWERJIT_DETERMINISTIC=layout
  std::vector<std::vector<int>> buckets_;  // gradient indices all-reduced together across processes
  bool has_ema_ = false;
  std::map<std::string, std::string> ema_shadows_;  // variable -> its EMA shadow
  std::vector<std::string> gradient_inputs_;
  std::vector<Shape> gradient_shapes_;
  // Each CPU tower's cores (empty for GPU towers), and whether its threads are pinned to them
  // (TOWERJIT_PIN_TOWERS).
  std::vector<std::vector<int>> tower_cores_;
  bool pinned_ = true;
  // A CPU tower's own threads for its loops and products when the machine has more cores than
  // CPU towers (one tower on 2 cores: a pool of 2); none when each tower has one core.
  std::vector<std::unique_ptr<ThreadPool>> tower_pools_;
  std::vector<std::unique_ptr<DeviceProgram>> tower_programs_;    // one per tower: run() is not reentrant
  std::vector<std::unique_ptr<CpuProgram>> apply_programs_;    // one per replica
  std::vector<std::unique_ptr<DeviceProgram>> predict_programs_;  // one per tower, when logits are given
  std::vector<HostVariables> replicas_;  // one copy, or one per tower (replicated sync)
  std::unique_ptr<GpuResidentSync> on_gpus_;  // sync GPU towers keeping the variables there
  bool host_stale_ = false;  // replicas_[0] lags the GPUs' copies
  ThreadPool threads_;
  mutable std::mutex apply_mutex_;
  std::atomic<int64_t> applies_ = 0;
  AsyncReport async_so_far_;   // under apply_mutex_; the mean is computed by async_report()
  int64_t staleness_sum_ = 0;
  report::Trace* trace_ = nullptr;
};

}  // namespace towerjit
