// The small model the tower tests train and the batches they feed it: an MLP 5-4-3 with a
// mean softmax cross-entropy, inputs "x" [B, 5] and "labels" [B] (classes 0-2).
#pragma once

#include <algorithm>
#include <cmath>
#include <random>

#include "towerjit.h"

namespace towerjit::testing {

// The model's loss, built in `graph`.
inline Tensor small_mlp_loss(Graph& graph) {
  GraphScope use(graph);
  auto x = input("x", {kBatch, 5});
  auto labels = input("labels", {kBatch}, DType::i32);
  auto logits = dense(relu(dense(x, 4, "fc1")), 3, "fc2");
  return mean(softmax_cross_entropy(logits, labels));
}

// `n` examples: x uniform in [-1, 1), labels drawn from {0, 1, 2}.
inline HostFeeds batch_of(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  HostTensor x({n, 5}), labels({n}, DType::i32);
  for (float& v : x.f32) v = u(rng);
  for (int64_t i = 0; i < n; ++i) labels.i32[i] = static_cast<int32_t>(rng() % 3);
  return {{"x", x}, {"labels", labels}};
}

// The largest difference between two sets of the same variables, relative to a's values (and
// absolute below 1).
inline double largest_relative_difference(const HostVariables& a, const HostVariables& b) {
  double worst = 0;
  for (const auto& [name, t] : a)
    for (int64_t k = 0; k < t.size(); ++k)
      worst = std::max<double>(worst, std::abs(t.f32[k] - b.at(name).f32[k]) / std::max(1.0f, std::abs(t.f32[k])));
  return worst;
}

}  // namespace towerjit::testing
