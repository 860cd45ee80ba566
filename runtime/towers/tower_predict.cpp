// TowerTrainer's inference side: predict() splits inputs over the towers and concatenates
// their logits; evaluate() scores them, optionally with the EMA shadows as the weights.
#include <algorithm>
#include <cmath>
#include <optional>

#include "dsl/error.h"
#include "runtime/towers/tower_state.h"
#include "runtime/towers/tower_trainer.h"

namespace towerjit {
namespace {

// Mean softmax cross-entropy (summed) and correct predictions of `logits` [n, classes].
std::pair<double, int64_t> score(const HostTensor& logits, const HostTensor& labels, int64_t offset, Loc loc) {
  const int64_t n = logits.shape[0], classes = logits.shape[1];
  double loss = 0;
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = &logits.f32[i * classes];
    const int32_t label = labels.i32[offset + i];
    user_check(label >= 0 && label < classes, loc)
        << "evaluate: label " << label << " of example " << offset + i << " is outside [0, "
        << classes << "); labels are class indices of the logits";
    const int64_t best = std::max_element(row, row + classes) - row;
    double largest = row[best], sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(row[c] - largest);
    loss += largest + std::log(sum) - row[label];
    correct += best == label;
  }
  return {loss, correct};
}

}  // namespace

HostTensor TowerTrainer::predict(const HostFeeds& inputs, bool ema_weights, Loc loc) {
  user_check(!state_->compiled.predict.empty(), loc)
      << "predict: the trainer was built without the model's output; pass it as "
      << "TowerTrainerOptions{.logits = logits}";
  user_check(!ema_weights || state_->compiled.has_ema, loc)
      << "predict with EMA weights: the trainer keeps no moving averages; pass "
      << "TowerTrainerOptions{.ema = ExponentialMovingAverage{...}}";
  std::optional<HostVariables> shadows;
  if (ema_weights) shadows = ema_weights_of(variables());
  return predict_with(inputs, shadows ? *shadows : variables(), loc);
}

HostTensor TowerTrainer::predict_with(const HostFeeds& inputs, HostVariables& values, Loc loc) {
  user_check(!inputs.empty() && inputs.begin()->second.shape.rank() > 0, loc)
      << "predict: no batched inputs fed; feed the model's inputs";
  const int64_t examples = inputs.begin()->second.shape[0];
  user_check(examples >= 1, loc) << "predict: no examples fed; feed at least one";
  // A chunk smaller than the tower count (the end of an evaluation set) uses fewer towers.
  const int used = static_cast<int>(std::min<int64_t>(state_->towers.size(), examples));
  const std::vector<int64_t> slices = split_batch(examples, used, state_->towers.split_policy(), loc);
  const std::vector<HostFeeds> feeds = detail::cut_batch(inputs, slices, loc);
  std::vector<HostTensor> parts(slices.size());
  // Variables are only read here, so every tower may share one copy.
  state_->on_tower_threads(used, [&](int t) { parts[t] = std::move(state_->compiled.predict[t]->run(feeds[t], values)[0]); });
  Shape shape = parts[0].shape;
  shape[0] = examples;
  HostTensor all(shape);
  int64_t offset = 0;
  for (const HostTensor& p : parts) {
    std::copy(p.f32.begin(), p.f32.end(), all.f32.begin() + offset);
    offset += p.size();
  }
  return all;
}

TowerTrainer::Evaluation TowerTrainer::evaluate(const HostFeeds& inputs, const HostTensor& labels,
                                                bool ema_weights, int64_t chunk, Loc loc) {
  user_check(chunk >= 1, loc) << "evaluate: chunk " << chunk << " must be at least 1";
  user_check(labels.dtype == DType::i32 && labels.shape.rank() == 1, loc)
      << "evaluate: labels must be i32 [examples] (class indices), got " << dtype_name(labels.dtype)
      << labels.shape.str();
  const int64_t examples = labels.shape[0];
  std::optional<HostVariables> shadows;
  if (ema_weights) {
    user_check(state_->compiled.has_ema && !state_->compiled.predict.empty(), loc)
        << "evaluate with EMA weights: the trainer keeps no moving averages; pass "
        << "TowerTrainerOptions{.ema = ExponentialMovingAverage{...}}";
    shadows = ema_weights_of(variables());
  }
  Evaluation result;
  double loss = 0;
  int64_t correct = 0;
  for (int64_t start = 0; start < examples; start += chunk) {
    const int64_t rows = std::min(chunk, examples - start);
    HostFeeds part;
    for (const auto& [name, t] : inputs) {
      user_check(t.shape.rank() > 0 && t.shape[0] == examples, loc)
          << "evaluate: input \"" << name << "\" has " << count_of(t.shape.rank() ? t.shape[0] : 0, "example")
          << " but the labels have " << examples << "; feed one label per example";
      part[name] = rows_of(t, start, rows);
    }
    const HostTensor logits = predict_with(part, shadows ? *shadows : variables(), loc);
    const auto [chunk_loss, chunk_correct] = score(logits, labels, start, loc);
    loss += chunk_loss;
    correct += chunk_correct;
  }
  result.examples = examples;
  result.accuracy = examples ? static_cast<double>(correct) / examples : 0;
  result.loss = examples ? loss / examples : 0;
  return result;
}

// The variables with each averaged variable's value replaced by its shadow's.
HostVariables TowerTrainer::ema_weights_of(const HostVariables& values) const {
  HostVariables out = values;
  for (const auto& [variable, shadow] : state_->compiled.ema_shadows) out.at(variable) = values.at(shadow);
  return out;
}

}  // namespace towerjit
