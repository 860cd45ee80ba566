// The training loop: batches from an input pipeline, one trainer step each, and hooks around
// it for logging, evaluation and checkpoints (tensorpack's callbacks, PyTorch Lightning's
// hooks). The loop owns nothing but the order of events:
//
//   begin -> { next batch -> step -> NaN check -> after_step [-> after_epoch] } -> end
//
// The step number counts batches since the start of training (resumed runs included), so it is
// the pipeline's position: epoch * batches_per_epoch + batch.
//
// Sync towers, and a single async tower, train one batch per trainer.step(). Several async
// towers run free (the seed's asynchronous trainer): each works through its own slices of the
// batches and applies after each, up to AsyncTowers::window() batches (or the staleness bound)
// ahead of the slowest, with no barrier per batch. Their hooks still see every batch once, in
// order, after all its slices are applied; a step whose hooks use the trainer (see
// Hook::uses_trainer_at) stops the towers there, so an evaluation or a checkpoint sees the
// applies of exactly the batches before it and the pipeline's position matches.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/data/batch_pipeline.h"
#include "runtime/towers/interrupts.h"
#include "runtime/towers/tower_trainer.h"

namespace towerjit {

struct StepEvent {
  int64_t step = 0;        // batches trained so far, this one included (1 after the first)
  int64_t epoch = 0;       // 0-based epoch of this batch
  int64_t batch_in_epoch = 0;
  int64_t batches_per_epoch = 0;
  int64_t examples = 0;    // in this batch
  double loss = 0;         // the batch's mean loss
  double learning_rate = 0;
  double seconds = 0;      // wall time of the step (the trainer only, not the pipeline's wait;
                           // free-running towers: from handing the batch out to its last apply)
  double samples_per_s = 0;  // examples over the wall time since the previous step's hooks
                             // returned: the wait for the batch and the step
  data::PipelinePosition next;  // where the pipeline stands after this batch: a checkpoint's position
  int stopped_by = 0;           // in Hook::end only: the signal (SIGINT, SIGTERM) that stopped
                                // training early, else 0
};

class Hook {
 public:
  virtual ~Hook() = default;
  virtual void begin(TowerTrainer&, const data::PipelinePosition& start) {}
  virtual void after_step(TowerTrainer&, const StepEvent&) {}
  // After the last batch of epoch `event.epoch`, right after that step's after_step.
  virtual void after_epoch(TowerTrainer&, const StepEvent&) {}
  // After the last step, also when training stops early (max_steps, a signal: then
  // last.stopped_by says which); not after an error.
  virtual void end(TowerTrainer&, const StepEvent& last) {}
  // Whether after_step / after_epoch for `upcoming` (all known but its loss, rate and time)
  // will use the trainer: evaluate, save or read its variables. Free-running async towers
  // (below) stop before the next batch until such a step's hooks return; otherwise they run on
  // while the hooks run. A hook that cannot tell answers true, the safe default.
  virtual bool uses_trainer_at(const StepEvent& upcoming) const { return true; }
  // What of the training this hook has kept so far, for the message of a run that stops
  // ("the newest checkpoint, runs/ckpt-938.tjck"); empty: nothing.
  virtual std::string kept_state() const { return ""; }
};

struct FitOptions {
  // Train until the pipeline reaches the start of this epoch. Unset: 1 epoch, or, when
  // max_steps is set, as many as max_steps takes.
  std::optional<int64_t> epochs;
  int64_t max_steps = 0;  // > 0: stop once the step number reaches it
  std::vector<Hook*> hooks;
  int accumulate = 1;     // micro-batches per apply (TowerTrainer::StepOptions::accumulate)
  // While training, SIGINT and SIGTERM stop the run after the step in progress (see fit());
  // false leaves the process's own handling of them alone. Sync towers over several processes
  // stop after the same step on every rank; async towers over several processes never watch
  // (mpirun ends them all on Ctrl-C).
  bool stop_on_signals = true;
};

// Trains until `options.epochs` epochs (counted from the first batch of training, so a resumed
// run stops where an uninterrupted one would) or `max_steps` steps. Errors (towerjit::Error):
// epochs < 1 or max_steps < 0; both given, with max_steps beyond the steps the epochs hold
// (training would stop short of it, at the epochs' end); a loss that is NaN or infinite, naming the step and epoch, the
// batch's first non-finite input if there is one (else the training diverged), and what the
// hooks have kept — raised before any hook sees that step, so no checkpoint holds its
// weights; whatever a hook or the trainer raises.
//
// On SIGINT or SIGTERM (with options.stop_on_signals, runtime/towers/interrupts.h) the step
// in progress finishes and its hooks run, no further batch starts, the hooks' end() runs (a
// CheckpointHook writes its final checkpoint there; an EvalHook does not evaluate), and then fit
// throws Interrupted naming the signal, the last step and what the hooks kept. A second signal
// ends the process at once. fit never exits the process itself. Over several processes (sync
// towers) every rank sums the ranks' signals at the end of each step (a 16-byte all-reduce), so
// a signal any rank received stops every rank after that step, and each throws Interrupted.
StepEvent fit(TowerTrainer& trainer, data::BatchPipeline& pipeline, const FitOptions& options,
              Loc loc = Loc::current());

}  // namespace towerjit
