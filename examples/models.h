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

// conv3x3 without bias + batch norm + ReLU. Batch norm and dropout follow the program: the
// trainer's steps train, its predict() and evaluate() infer (dsl/phase.h).
inline tj::Tensor conv_bn_relu(tj::Tensor x, int64_t filters, const std::string& name) {
  x = tj::conv2d(x, filters, 3, name, {.pad = 1, .use_bias = false});
  return tj::relu(tj::batch_norm(x, name + "_bn"));
}

// x + conv_bn(conv_bn_relu(x)), then ReLU: a ResNet basic block at x's width.
inline tj::Tensor residual_block(tj::Tensor x, int64_t filters, const std::string& name) {
  auto y = conv_bn_relu(x, filters, name + "/a");
  y = tj::conv2d(y, filters, 3, name + "/b", {.pad = 1, .use_bias = false});
  y = tj::batch_norm(y, name + "/b_bn");
  return tj::relu(x + y);
}

// A small ResNet: conv 16 + a residual block + maxpool2, conv 32 + a residual block + maxpool2,
// dropout 0.25, dense 1568->10. Batch norm after every convolution.
inline tj::Tensor resnet(tj::Tensor image) {
  auto x = tj::reshape(image, {tj::kBatch, 1, 28, 28});
  x = tj::max_pool2d(residual_block(conv_bn_relu(x, 16, "conv1"), 16, "block1"));
  x = tj::max_pool2d(residual_block(conv_bn_relu(x, 32, "conv2"), 32, "block2"));
  x = tj::dropout(tj::reshape(x, {tj::kBatch, 32 * 7 * 7}), 0.25);
  return tj::dense(x, 10, "logits");
}

}  // namespace examples
