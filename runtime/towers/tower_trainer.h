// Training over towers: each tower runs the same compiled forward and backward program on its
// slice of the batch (a CPU tower on a thread of its own pinned to cores of its own; a GPU tower
// on a stream of its own), then the strategy decides how the gradients reach the variables:
//   sync (SyncAverage, SyncPerTowerMean, SyncSum): the towers' gradients are combined with
//     reduction_weights() in a fixed tower order (bitwise reproducible), then applied once per
//     copy of the variables (replicated: one copy per tower; parameter_server: one copy);
//   async (AsyncApply): each tower applies its own (scaled) gradient as soon as it has it; an
//     apply is one critical section, so no apply is torn or lost, but towers read whatever
//     the variables hold when they start.
// The batch is symbolic in the programs, so uneven slices (7 and 8 of 15) share one compiled
// program. The variables live in host memory (the seed's placement on the CPU) unless sync
// towers that are all GPUs keep them there (TOWERJIT_GPU_VARIABLES=on).
//
// TowerTrainer is a facade: it compiles the programs (runtime/towers/compile_towers.h), and a
// factory picks, once, the strategy that trains them from a table of the supported
// combinations (runtime/towers/tower_strategy.h; docs/architecture.md has the map).
// Under mpirun (runtime/dist/world.h) `towers` are this process's towers; the world's are every
// process's in rank order, a batch is split over all of them, and a sync step reduces this
// process's towers in-process, then all-reduces across the processes (docs/distributed.md).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dsl/ema.h"
#include "dsl/optimizers.h"
#include "dsl/towers.h"
#include "runtime/dist/world_layout.h"
#include "runtime/host_tensor.h"

namespace towerjit {

namespace report {
class Trace;
}
namespace data {
class BatchPipeline;
}
namespace detail {
class TowerState;
class TowerStrategy;
struct TrainerAccess;  // towerjit's own code and tests: runtime/towers/trainer_internals.h
}  // namespace detail


// How the strategy places the variables and reduces, agreed across the ranks of a world. Each
// field has an environment variable that, when set, overrides it (jit/knobs.h): a way to try
// a placement without rebuilding; a program chooses through these fields.
struct TowerStrategyOptions {
  // TOWERJIT_GPU_VARIABLES: where towers that are all GPUs keep the variables. Sync towers:
  // true keeps a copy on each GPU, reduced and applied there (runtime/towers/gpu_resident_sync.h);
  // unset or false, in host memory. Async towers in one process: unset or true follows the
  // seed's rule (dsl/towers.h place_variables): with fewer than 4 towers each variable lives on
  // one GPU and is applied there (runtime/towers/placed_variables.cpp), from 4 towers on in
  // host memory; false keeps them in host memory. No effect on CPU towers.
  std::optional<bool> gpu_variables;
  // TOWERJIT_DETERMINISTIC=layout: sync training is bitwise the same whatever the split of the
  // towers into processes (every tower's gradients gathered and summed in world order).
  bool deterministic_layout = false;
  // TOWERJIT_BUCKET_MB: the gradient buckets' size, in MB, reduced across processes (and
  // between GPUs) while the backward pass goes on; 0: a bucket per gradient.
  double bucket_mb = 25;
  // bf16 or f16: sync towers' gradients cross processes in 16 bits (Horovod's
  // Compression.fp16): each process's sum is rounded, the all-reduce sums in the format (every
  // partial sum rounded, in the pinned algorithm's fixed order) and the result is widened back.
  // Half the bytes of the gradients' all-reduce. f32 (the default): no compression. Where the
  // gradients cross processes in host memory (runtime/towers/reducer.h, stage 3), and, with the
  // variables on the GPUs, where they cross GPUs through NCCL or processes through MPI
  // (runtime/towers/gpu_resident_sync.h); nothing else changes within one process.
  DType gradient_compression = DType::f32;
  // TOWERJIT_PREFETCH_FEEDS: fit() on sync towers that are all GPUs, with the variables on the
  // GPUs, copies each batch to the GPUs while the step before it trains, from a thread of its
  // own through page-locked memory on a copy stream (runtime/towers/feed_prefetch.h), and, in
  // one process, queues each step behind the one before; false: each batch is copied at its
  // own step, by the training thread, and each step is waited for before the next.
  bool prefetch_feeds = true;
};

struct TowerTrainerOptions {
  uint64_t seed = 1;  // initial variable values
  // Shadows of the trainable variables, updated after every apply (TF's semantics, dsl/ema.h);
  // predict()/evaluate() can then use them.
  std::optional<ExponentialMovingAverage> ema = std::nullopt;
  // The model's output, for predict() and evaluate() (a [B, classes] f32 tensor). They run
  // the model in inference (dsl/phase.h): batch norm on its moving statistics, no dropout.
  Tensor logits = {};
  TowerStrategyOptions strategy = {};
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

  // The model's output in the graph predict() compiles (selected for inference: batch norm on
  // its moving statistics, no dropout), for exporters (runtime/interop/onnx_export.h); an
  // invalid tensor when the trainer was built without the `logits` option.
  Tensor inference_logits() const;

  // The trained values of every variable (model, optimiser slots, EMA shadows, global step):
  // what a checkpoint stores. With replicated sync towers, tower 0's copy (all are equal).
  // With the variables on the GPUs (TOWERJIT_GPU_VARIABLES), the first GPU's copy, fetched
  // when it has changed since the last call.
  HostVariables& variables();
  // The averaged gradients the last step applied, by variable name ("fc1/kernel"), with sync
  // towers whose variables are in host memory (the seed's placement, the default); empty with
  // the variables on the GPUs or async towers, whose gradients are never whole in host memory.
  // Valid until the next step.
  std::map<std::string, const HostTensor*> last_gradients() const;
  // The devices holding a copy of each variable, by name: {cpu(0)} for host memory; each GPU
  // with sync towers keeping the variables on the GPUs; the one GPU the seed's rule chose with
  // async GPU towers (TowerStrategyOptions::gpu_variables).
  std::map<std::string, std::vector<Device>> variable_devices() const;
  // Replaces every variable's value (e.g. from a checkpoint) and the apply count. Errors: a
  // variable missing from `values` or with another shape or dtype, an extra variable.
  void restore(const HostVariables& values, int64_t applies, Loc loc = Loc::current());

  const Towers& towers() const;
  // Where this process's towers sit among the world's (one process: all of them).
  const dist::WorldLayout& world_layout() const;
  // The rows [first, first + count) of a batch of `batch` examples that this process's towers
  // train on: the world's split, this rank's towers' slices (under mpirun, a pipeline's
  // PipelineOptions::part; docs/distributed.md). Errors: more world towers than examples.
  std::pair<int64_t, int64_t> own_rows(int64_t batch, Loc loc = Loc::current()) const;
  int64_t applies() const;  // optimiser applies so far
  // With loss scaling (Optimizer::with_loss_scale): the scale after the latest apply and the
  // steps skipped so far (also the variables DynamicLossScale::kScale, kSkippedSteps). Empty
  // without loss scaling, or before the first apply.
  struct LossScaleReport {
    double scale = 0;
    int64_t skipped_steps = 0;
  };
  std::optional<LossScaleReport> loss_scale() const;
  // Spans for each tower's compute, the reduction and the applies go to `trace` (null: off).
  void set_trace(report::Trace* trace);

 private:
  friend struct detail::TrainerAccess;
  HostTensor predict_with(const HostFeeds& inputs, HostVariables& values, Loc loc);
  HostVariables ema_weights_of(const HostVariables& values) const;

  std::unique_ptr<detail::TowerState> state_;       // what every strategy shares
  std::unique_ptr<detail::TowerStrategy> strategy_;  // chosen once, by the factory's table
};

}  // namespace towerjit
