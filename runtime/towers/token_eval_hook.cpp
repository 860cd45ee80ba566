#include "runtime/towers/token_eval_hook.h"

#include <cstdio>

#include "dsl/error.h"

namespace towerjit {

TokenEvalHook::TokenEvalHook(const data::TensorDataset& test, report::Progress& progress, report::MetricsSink* metrics,
                             TokenEvalHookOptions options, CallSite site)
    : site_(std::move(site)), test_inputs_(test.inputs()), progress_(progress), metrics_(metrics), options_(options) {
  user_check(test.has_labels(), site_) << "TokenEvalHook: the dataset has no label array \"" << test.label_name()
                                       << "\"; name the per-token labels: TensorDataset(arrays, \"targets\")";
  test_labels_ = test.labels();
  user_check(test_labels_.dtype == DType::i32 && test_labels_.shape.rank() == 2, site_)
      << "TokenEvalHook: the label array \"" << test.label_name() << "\" is " << dtype_name(test_labels_.dtype)
      << test_labels_.shape.str() << "; it scores a class index per token, i32 [N, T] (EvalHook scores i32 [N])";
  user_check(!test_inputs_.empty(), site_) << "TokenEvalHook: the dataset holds only its label array \""
                                           << test.label_name() << "\"; add the model's inputs";
  user_check(options_.every >= 0 && options_.chunk >= 1, site_)
      << "TokenEvalHook: every " << options_.every << " must be 0 or more and chunk " << options_.chunk
      << " at least 1";
}

void TokenEvalHook::after_step(TowerTrainer& trainer, const StepEvent& e) {
  if (options_.every > 0 && e.step % options_.every == 0) evaluate(trainer, e);
}

void TokenEvalHook::after_epoch(TowerTrainer& trainer, const StepEvent& e) {
  if (e.step != evaluated_at_) evaluate(trainer, e);
}

void TokenEvalHook::end(TowerTrainer& trainer, const StepEvent& last) {
  // A run stopped by a signal should stop soon: no pass over the held-out set.
  if (last.step != evaluated_at_ && last.step > 0 && last.stopped_by == 0) evaluate(trainer, last);
}

bool TokenEvalHook::uses_trainer_at(const StepEvent& e) const {
  return (options_.every > 0 && e.step % options_.every == 0) || e.batch_in_epoch + 1 == e.batches_per_epoch;
}

void TokenEvalHook::evaluate(TowerTrainer& trainer, const StepEvent& e) {
  last_ = evaluate_tokens(trainer, test_inputs_, test_labels_, {.ema_weights = options_.ema_weights, .chunk = options_.chunk},
                          site_);
  evaluated_at_ = e.step;
  char line[200];
  std::snprintf(line, sizeof line, "epoch %lld, step %lld: held-out loss %.4f, perplexity %.3f, token accuracy %.4f%s",
                static_cast<long long>(e.epoch + 1), static_cast<long long>(e.step), last_.loss, last_.perplexity,
                last_.accuracy, options_.ema_weights ? " (EMA weights)" : "");
  progress_.line(line);
  if (metrics_)
    metrics_->log_eval({.step = e.step, .epoch = e.epoch + 1, .test_accuracy = last_.accuracy, .test_loss = last_.loss});
}

}  // namespace towerjit
