#include "runtime/towers/token_evaluation.h"

#include <algorithm>
#include <cmath>

#include "dsl/error.h"

namespace towerjit {
namespace {

struct Sums {
  double loss = 0;
  int64_t correct = 0;
};

// The summed cross-entropy and correct tokens of logits [n, T, V] against rows
// [first, first + n) of `labels` [N, T]; in double, from the f32 logits.
Sums score(const HostTensor& logits, const HostTensor& labels, int64_t first, const CallSite& site) {
  const int64_t n = labels.shape[0] == 0 ? 0 : logits.shape[0], steps = labels.shape[1];
  user_check(logits.shape.rank() == 3 && logits.shape[1] == steps, site)
      << "evaluate_tokens: the model's logits are " << logits.shape.str() << " for " << n
      << " examples, but per-token labels " << labels.shape.str() << " need logits [n, " << steps
      << ", V]; pass the model's output before any reshape as TowerTrainerOptions::logits";
  const int64_t classes = logits.shape[2];
  Sums s;
  for (int64_t i = 0; i < n * steps; ++i) {
    const float* row = &logits.f32[i * classes];
    const int32_t label = labels.i32[first * steps + i];
    user_check(label >= 0 && label < classes, site)
        << "evaluate_tokens: label " << label << " of example " << first + i / steps << ", token " << i % steps
        << " is outside [0, " << classes << "); labels are class indices of the logits' last axis";
    const int64_t best = std::max_element(row, row + classes) - row;
    const double largest = row[best];
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(row[c] - largest);
    s.loss += largest + std::log(sum) - row[label];
    s.correct += best == label;
  }
  return s;
}

}  // namespace

TokenEvaluation evaluate_tokens(TowerTrainer& trainer, const HostFeeds& inputs, const HostTensor& labels,
                                TokenEvalOptions options, const CallSite& site) {
  user_check(labels.dtype == DType::i32 && labels.shape.rank() == 2, site)
      << "evaluate_tokens: labels must be i32 [examples, tokens] (a class index per token), got "
      << dtype_name(labels.dtype) << labels.shape.str();
  user_check(trainer.inference_logits().valid(), site)
      << "evaluate_tokens: the trainer was built without the model's output; pass the logits [B, T, V] as "
         "TowerTrainerOptions{.logits = logits}";
  user_check(options.chunk >= 1, site) << "evaluate_tokens: chunk " << options.chunk << " must be at least 1";
  const int64_t examples = labels.shape[0];
  for (const auto& [name, t] : inputs)
    user_check(t.shape.rank() > 0 && t.shape[0] == examples, site)
        << "evaluate_tokens: input \"" << name << "\" has " << count_of(t.shape.rank() ? t.shape[0] : 0, "example")
        << " but the labels have " << examples << "; feed one row of labels per example";
  Sums total;
  for (int64_t start = 0; start < examples; start += options.chunk) {
    const int64_t rows = std::min(options.chunk, examples - start);
    HostFeeds part;
    for (const auto& [name, t] : inputs) part[name] = rows_of(t, start, rows);
    const Sums s = score(trainer.predict(part, options.ema_weights, site.loc()), labels, start, site);
    total.loss += s.loss;
    total.correct += s.correct;
  }
  TokenEvaluation r;
  r.examples = examples;
  r.tokens = examples * labels.shape[1];
  r.loss = r.tokens ? total.loss / static_cast<double>(r.tokens) : 0;
  r.perplexity = std::exp(r.loss);
  r.accuracy = r.tokens ? static_cast<double>(total.correct) / static_cast<double>(r.tokens) : 0;
  return r;
}

}  // namespace towerjit
