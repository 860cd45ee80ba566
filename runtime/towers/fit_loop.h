// fit()'s loop, shared by every strategy's way of feeding the towers (TowerStrategy::fit): which
// batch is next, when to stop, and what happens once a batch is trained (the NaN check, then
// the hooks). runtime/towers/fit.h has the order of events.
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/dist/transport.h"
#include "runtime/towers/fit.h"

namespace towerjit::detail {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start);

// A batch whose inputs may have fed a loss: the batch of that step, and, with free-running
// async towers, the later batches in flight, whose applies the step's slices may have seen.
struct Suspect {
  int64_t step;
  const HostFeeds* feeds;
};

class FitLoop {
 public:
  // `agree_over`: the world whose ranks train in lockstep (sync towers over several
  // processes), which then stop after the same step; null for a process alone.
  FitLoop(TowerTrainer& trainer, data::BatchPipeline& pipeline, const FitOptions& options, const InterruptWatch& watch,
          dist::Transport* agree_over, Loc loc);
  bool done() const;
  // The next batch, and the event it will give (all but its loss, rate and time).
  std::pair<data::Batch, StepEvent> next();
  // Whether a signal (agreed on by every rank, where they train in lockstep) asks the run to
  // stop after the batch being trained: for a loop that read the next batch ahead of it.
  bool stop_requested() const { return stop_signal() != 0; }
  // Whether a hook will use the trainer once batch `e` is trained.
  bool hooks_use_trainer(const StepEvent& e) const;
  // Batch `e` is trained, loss, rate and seconds filled in: the NaN check (naming a
  // non-finite input of `suspects`, the batches that may have fed the loss), then the hooks.
  void trained(StepEvent e, const std::vector<Suspect>& suspects);
  // "step 3's batch (epoch 1, batch 3 of 34)": which batch `e` is, for messages.
  static std::string step_in_words(const StepEvent& e);
  // The hooks' end; then, when a signal stopped the run, Interrupted.
  StepEvent end();

 private:
  [[noreturn]] void interrupted() const;
  std::string kept_state() const;
  [[noreturn]] void non_finite_loss(const StepEvent& e, const std::vector<Suspect>& suspects) const;
  int64_t step_of(const data::PipelinePosition& p) const { return p.epoch * per_epoch_ + p.batch; }
  int stop_signal() const { return agree_over_ ? agreed_signal_ : watch_.received(); }
  void agree_on_signals();

  TowerTrainer& trainer_;
  data::BatchPipeline& pipeline_;
  const FitOptions& options_;
  const InterruptWatch& watch_;
  dist::Transport* const agree_over_;
  int agreed_signal_ = 0;
  Loc loc_;
  const int64_t per_epoch_;
  StepEvent last_;
  Clock::time_point previous_;
};

}  // namespace towerjit::detail
