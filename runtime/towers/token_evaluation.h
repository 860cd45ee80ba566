// A language model's held-out score: per-token labels [N, T] against the model's logits
// [N, T, V], predicted through the trainer's towers (TowerTrainer::predict, so the same
// inference program and split as EvalHook's), reduced to the mean token loss, its perplexity
// and the token accuracy.
#pragma once

#include <cstdint>

#include "dsl/call_site.h"
#include "runtime/towers/tower_trainer.h"

namespace towerjit {

struct TokenEvaluation {
  double loss = 0;        // mean softmax cross-entropy per token, in nats
  double perplexity = 0;  // exp(loss)
  double accuracy = 0;    // the share of tokens whose largest logit is the label's
  int64_t tokens = 0, examples = 0;
};

struct TokenEvalOptions {
  bool ema_weights = false;  // the EMA shadows in place of the trained variables
  int64_t chunk = 256;       // examples predicted at a time (memory: chunk x T x V logits)
};

// Scores `labels` (i32 [N, T], class indices below V) against the logits predict() gives for
// `inputs` (every array [N, ...]). Errors (naming `site`): labels that are not i32 [N, T], an
// input with another example count, logits that are not [n, T, V], a label outside [0, V)
// (naming its example and position), and predict()'s own errors.
TokenEvaluation evaluate_tokens(TowerTrainer& trainer, const HostFeeds& inputs, const HostTensor& labels,
                                TokenEvalOptions options = {}, const CallSite& site = CallSite(std::source_location::current()));

}  // namespace towerjit
