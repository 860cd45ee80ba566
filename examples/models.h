// The models the examples train on Fashion-MNIST, written in the DSL. Each takes the flat
// image batch "image" f32 [B, 784] and returns logits f32 [B, 10].
#pragma once

#include "towerjit.h"

namespace examples {

namespace tj = towerjit;

// 784-hidden-hidden-10 with ReLU.
inline tj::Tensor mlp(tj::Tensor image, int64_t hidden = 256) {
  auto h = tj::relu(tj::dense(image, hidden, "fc1"));
  h = tj::relu(tj::dense(h, hidden, "fc2"));
  return tj::dense(h, 10, "logits");
}

// conv3x3 1->16 + ReLU + maxpool2, conv3x3 16->32 + ReLU + maxpool2, dense 1568->128 + ReLU,
// dense 128->10: the benchmark's CNN (bench/) with a hidden dense layer, which is what takes it
// past 90% test accuracy in 5 epochs; small enough to train in minutes on two CPU cores.
inline tj::Tensor cnn(tj::Tensor image) {
  auto x = tj::reshape(image, {tj::kBatch, 1, 28, 28});
  x = tj::max_pool2d(tj::relu(tj::conv2d(x, 16, 3, "conv1", {.pad = 1})));
  x = tj::max_pool2d(tj::relu(tj::conv2d(x, 32, 3, "conv2", {.pad = 1})));
  auto h = tj::relu(tj::dense(tj::reshape(x, {tj::kBatch, 32 * 7 * 7}), 128, "fc1"));
  return tj::dense(h, 10, "logits");
}

}  // namespace examples
