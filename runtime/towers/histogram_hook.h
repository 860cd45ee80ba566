// Histograms of the trainable variables and their gradients for TensorBoard's Histograms and
// Distributions tabs: every `every` steps, one histogram a variable, tagged "weights/<name>"
// ("weights/fc1/kernel"), and one of the gradient the step applied, "gradients/<name>", where
// the trainer keeps it (TowerTrainer::last_gradients: sync towers with host variables; a note
// says once when it does not).
// Off unless made (the examples' --histogram-every N); each costs a pass over the weights and a
// record of a few hundred bytes, so every 100 steps or so is the usual choice.
#pragma once

#include "dsl/graph.h"
#include "runtime/report/tensorboard.h"
#include "runtime/towers/fit.h"

namespace towerjit {

class HistogramHook : public Hook {
 public:
  // `graph` says which variables are trainable (optimiser slots, EMA shadows and the global
  // step are not drawn). Errors (at `loc`): `every` < 1.
  HistogramHook(const Graph& graph, report::TensorBoardWriter& writer, int64_t every, Loc loc = Loc::current());
  void after_step(TowerTrainer& trainer, const StepEvent& e) override;
  bool uses_trainer_at(const StepEvent& upcoming) const override { return upcoming.step % every_ == 0; }

 private:
  const Graph& graph_;
  report::TensorBoardWriter& writer_;
  int64_t every_;
  bool said_no_gradients_ = false;  // the note that this strategy has no gradients to draw, once
};

}  // namespace towerjit
