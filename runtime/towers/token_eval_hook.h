// EvalHook's sibling for language models: after each epoch, every `every` steps and at the end,
// the held-out set's mean token loss, perplexity and token accuracy (evaluate_tokens, through
// the trainer's towers), printed and logged.
//
// Its errors name the line that made it, also when that was std::make_unique (CallSite): a
// label outside the vocabulary is only found at the first evaluation, long after the call.
#pragma once

#include "dsl/call_site.h"
#include "runtime/data/tensor_dataset.h"
#include "runtime/report/metrics.h"
#include "runtime/report/progress.h"
#include "runtime/towers/fit.h"
#include "runtime/towers/token_evaluation.h"

namespace towerjit {

struct TokenEvalHookOptions {
  int64_t every = 0;         // also every this many steps (0: only after epochs and at the end)
  bool ema_weights = false;  // evaluate with the EMA shadows
  int64_t chunk = 256;       // examples predicted at a time
};

class TokenEvalHook : public Hook {
 public:
  // Every array of `test` but its label array is fed under its name; the label array (i32
  // [N, T]) is scored per token. Errors (naming `site`, the caller's line): a dataset without
  // labels or with only labels, labels that are not i32 [N, T]; at evaluation, those of
  // evaluate_tokens.
  TokenEvalHook(const data::TensorDataset& test, report::Progress& progress, report::MetricsSink* metrics,
                TokenEvalHookOptions options = {}, CallSite site = CallSite(std::source_location::current()));
  void after_step(TowerTrainer& trainer, const StepEvent& e) override;
  void after_epoch(TowerTrainer& trainer, const StepEvent& e) override;
  void end(TowerTrainer& trainer, const StepEvent& last) override;
  bool uses_trainer_at(const StepEvent& upcoming) const override;
  const TokenEvaluation& last() const { return last_; }
  int64_t evaluated_at() const { return evaluated_at_; }  // -1: not yet

 private:
  void evaluate(TowerTrainer& trainer, const StepEvent& e);
  CallSite site_;
  HostFeeds test_inputs_;
  HostTensor test_labels_;
  report::Progress& progress_;
  report::MetricsSink* metrics_;
  TokenEvalHookOptions options_;
  int64_t evaluated_at_ = -1;
  TokenEvaluation last_;
};

}  // namespace towerjit
