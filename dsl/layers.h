// Layers: functions that create their variables under a scope named after the layer and
// return an expression. Built again under a scope with reuse, they share those variables.
#pragma once

#include <optional>
#include <string>

#include "dsl/ops.h"
#include "dsl/variables.h"

namespace towerjit {

struct DenseOptions {
  bool use_bias = true;
  Initializer kernel_init = init::glorot_uniform();
  Initializer bias_init = init::zeros();
  // When set, l2_loss(kernel) * weight_decay joins the regularisation losses.
  std::optional<double> weight_decay;
};
// x [..., in] -> x @ kernel[in, units] + bias[units]; variables "<name>/kernel", "<name>/bias".
Tensor dense(Tensor x, int64_t units, const std::string& name, DenseOptions options = {},
             Loc loc = Loc::current());

struct Conv2DLayerOptions {
  int stride = 1;
  int pad = 0;
  bool use_bias = true;
  Initializer kernel_init = init::he_normal();
  Initializer bias_init = init::zeros();
  std::optional<double> weight_decay;
};
// x [N, C, H, W] -> conv2d with "<name>/kernel" [filters, C, k, k] plus "<name>/bias".
Tensor conv2d(Tensor x, int64_t filters, int kernel_size, const std::string& name,
              Conv2DLayerOptions options = {}, Loc loc = Loc::current());

struct BatchNormOptions {
  // moving = momentum * moving + (1 - momentum) * batch statistic: Keras' and TF's convention;
  // PyTorch's momentum is 1 - this. 0.9 is PyTorch's default (its 0.1) and tensorpack's; Keras
  // uses 0.99, whose averages take some 500 steps to forget their initial values (docs/dsl.md).
  double momentum = 0.9;
  double epsilon = 1e-3;
  int axis = 1;            // the channel axis: 1 for NCHW and for [N, features]
};
// Training: normalises with the batch's mean and (biased) variance over every axis but `axis`
// and adds two update ops for "<name>/moving_mean" and "<name>/moving_variance".
// Inference: normalises with the moving statistics. Learns "<name>/gamma" and "<name>/beta".
// Without `training`, both: the program running it picks (dsl/phase.h), so a trainer's step
// trains and its predict()/evaluate() infer. With it, the phase is fixed when it is built.
Tensor batch_norm(Tensor x, const std::string& name, BatchNormOptions options = {},
                  Loc loc = Loc::current());
Tensor batch_norm(Tensor x, bool training, const std::string& name, BatchNormOptions options = {},
                  Loc loc = Loc::current());
// A name written as a literal: without this overload, batch_norm(x, "bn", {.axis = 0}) would
// take "bn" for `training` (a pointer converts to bool) and {.axis = 0} for the name.
inline Tensor batch_norm(Tensor x, const char* name, BatchNormOptions options = {}, Loc loc = Loc::current()) {
  return batch_norm(x, std::string(name), options, loc);
}

struct DropoutOptions {
  uint64_t seed = 0;  // mixed with the scope path into the mask's Philox key
};
// Training: zeroes each element with probability `rate` and scales the rest by 1 / (1 - rate),
// with a fresh mask every step. Inference: the identity. Without `training`, the program
// running it picks, as for batch_norm.
Tensor dropout(Tensor x, double rate, DropoutOptions options = {}, Loc loc = Loc::current());
Tensor dropout(Tensor x, double rate, bool training, uint64_t seed = 0, Loc loc = Loc::current());

}  // namespace towerjit
