// The benchmark's training steps (issue 3, "Speed"), built in the DSL: the model, mean softmax
// cross-entropy, the gradients, and SGD with momentum written as update ops, so one
// CpuProgram(graph, {loss}, run_update_ops = true) run is one whole training step.
//
//   mlp-large  784-512-512-10, ReLU, batch 256
//   mlp-small  784-64-64-10, ReLU, batch 64
//   cnn        conv3x3(1->16, pad 1)+ReLU+maxpool2, conv3x3(16->32, pad 1)+ReLU+maxpool2,
//              dense 1568->10, batch 128; input [B, 1, 28, 28]
//   resnet-bn  examples/models.h's ResNet, batch 128
//   gpt-small  examples/char_lm's model with its defaults (examples/gpt.h): 2 pre-norm blocks
//              of width 64, 4 heads, context 64, vocabulary 86 (the licence corpus' alphabet),
//              batch 32; inputs "tokens" and "targets" i32 [B, 64], per-token cross-entropy
//
// The optimiser is PyTorch's SGD momentum (dampening 0, no Nesterov): for each trainable w
// with gradient g and a non-trainable momentum variable m (zeros), m' = 0.9 m + g and
// w' = w - 0.05 m'. bench/torch_baseline.py builds the same three models.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_program.h"

namespace towerjit::bench {

inline constexpr double kLearningRate = 0.05;
inline constexpr double kMomentum = 0.9;

struct TrainStep {
  std::string workload;
  int64_t batch = 0;
  Shape image;  // the "image" input with the batch bound, e.g. [256, 784] or [128, 1, 28, 28]
  // A language model's step (gpt-small) instead: "tokens" and "targets" i32 [batch, context]
  // below `vocab` in place of "image" and "label".
  int64_t context = 0, vocab = 0;
  std::unique_ptr<Graph> graph;  // owned here: programs compiled from it must not outlive it
  Tensor loss;                   // the mean cross-entropy, the step's one fetch
  std::vector<Tensor> trainable;
};

// The workloads' names, in the order the benchmark runs them.
std::vector<std::string> workload_names();

// Builds the training-step graph of `workload` (one of workload_names()); throws
// towerjit::Error for an unknown name.
TrainStep build_train_step(const std::string& workload);

// Fixed random data: "image" uniform in [0, 1), "label" uniform over the 10 classes (or
// "tokens" and "targets" uniform over the vocabulary).
HostFeeds random_feeds(const TrainStep& step, uint32_t seed);

// Every variable's initial value (weights from their initialisers, momenta zero).
HostVariables initial_variables(const TrainStep& step, uint64_t seed);

}  // namespace towerjit::bench
