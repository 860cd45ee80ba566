// Optimisers as graph builders: apply() appends the update ops of one training step (new
// weights, new slot values, the global step's increment) to the graph, so the whole apply is
// fused and compiled with the rest of the step.
//
// The formulas are PyTorch's torch.optim ones, term for term (docs/optimizers.md lists them),
// with t = global_step + 1 the number of the update being made. Slots are non-trainable f32
// variables, zeros unless said otherwise, named "<variable>/<slot>":
//   momentum: "momentum"   adam, adamw: "adam_m", "adam_v"   adagrad: "adagrad_sum"
//   rmsprop: "rmsprop_sq", "rmsprop_mg" (centered), "rmsprop_momentum" (momentum > 0)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dsl/loss_scale.h"
#include "dsl/schedules.h"
#include "dsl/tensor.h"

namespace towerjit {

enum class OptimizerKind { sgd, momentum, adam, adamw, rmsprop, adagrad };

// A value describing an optimiser; build one with the functions below, adjust it with the
// with_* methods, and call apply() once per graph (or once per tower for async towers).
struct Optimizer {
  OptimizerKind kind = OptimizerKind::sgd;
  Schedule learning_rate = 0.01;
  double momentum = 0;      // momentum; rmsprop (0: none)
  bool nesterov = false;    // momentum
  double beta1 = 0.9;       // adam, adamw
  double beta2 = 0.999;     // adam, adamw
  double alpha = 0.99;      // rmsprop: smoothing of the squared gradient
  bool centered = false;    // rmsprop: divide by the gradient's estimated variance
  double eps = 1e-8;        // adam, adamw, rmsprop; adagrad 1e-10
  double lr_decay = 0;      // adagrad: lr / (1 + (t - 1) lr_decay)
  double initial_accumulator = 0;  // adagrad: the sum's initial value
  // adamw: decoupled, w *= 1 - lr * weight_decay before the step. Every other optimiser:
  // L2 through the gradient, g += weight_decay * w (PyTorch's weight_decay).
  double weight_decay = 0;
  double clip_norm = 0;     // > 0: clip by global norm before anything else (TF's definition)
  // Dynamic loss scaling (dsl/loss_scale.h): apply() takes gradients of scale_loss(loss),
  // divides them by the scale and skips the step when one is not finite.
  std::optional<DynamicLossScale> loss_scale = std::nullopt;

  Optimizer with_weight_decay(double wd) const;
  // g_i *= clip_norm / max(global_norm, clip_norm), global_norm = sqrt(sum_i |g_i|^2) over
  // every gradient passed to one apply(): tf.clip_by_global_norm.
  Optimizer with_clip_by_global_norm(double clip_norm) const;
  // TF's LossScaleOptimizer, with PyTorch GradScaler's defaults and rules (dsl/loss_scale.h).
  // TowerTrainer scales the loss itself; a graph of your own differentiates scale_loss(loss).
  Optimizer with_loss_scale(DynamicLossScale scale = {}) const;
  // `loss` times the current loss scale (unchanged without loss scaling).
  Tensor scale_loss(Tensor loss, Loc loc = Loc::current()) const;

  // Appends the update ops for `variables` given their `grads` (same order and shapes) to
  // their graph, increments the global step once (see increment_global_step) and returns the
  // update ops it added. The learning rate is evaluated at the global step's value before the
  // increment. A sparse gradient (dsl/sparse_gradients.h: a table read only through gathers)
  // is applied to the rows it touched (docs/optimizers.md, "Sparse gradients"). Errors: sizes
  // differ, a target is not an f32 variable, a gradient is missing or has another shape, a
  // variable is listed twice, a hyperparameter is out of range, a sparse gradient given to
  // rmsprop, weight decay or clipping (the fix: sparse = false on its gather or embedding).
  std::vector<Tensor> apply(const std::vector<Tensor>& grads, const std::vector<Tensor>& variables,
                            Loc loc = Loc::current()) const;

  // "momentum(lr=0.05, momentum=0.9, nesterov)".
  std::string str() const;
};

struct SgdOptions {
  double weight_decay = 0;
};
struct MomentumOptions {
  bool nesterov = false;
  double weight_decay = 0;
};
struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0;  // adam: L2 through the gradient
};
struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.01;  // decoupled; PyTorch's AdamW default
};
struct RmsPropOptions {
  double alpha = 0.99, eps = 1e-8, momentum = 0;
  bool centered = false;
  double weight_decay = 0;
};
struct AdagradOptions {
  double lr_decay = 0, initial_accumulator = 0, eps = 1e-10;
  double weight_decay = 0;
};

// w -= lr * g.
Optimizer sgd(Schedule lr, SgdOptions options = {});
// buf = mu * buf + g; w -= lr * buf (Nesterov: w -= lr * (g + mu * buf)). Dampening is 0.
Optimizer momentum(Schedule lr, double mu, MomentumOptions options = {});
Optimizer adam(Schedule lr = 1e-3, AdamOptions options = {});
Optimizer adamw(Schedule lr = 1e-3, AdamWOptions options = {});
Optimizer rmsprop(Schedule lr = 1e-2, RmsPropOptions options = {});
Optimizer adagrad(Schedule lr = 1e-2, AdagradOptions options = {});

namespace detail {
// 1 - beta^t for beta in [0, 1) and t an f32 tensor of whole numbers >= 1: Adam's bias
// corrections, within 10 f32 roundings of the exact value (1 - pow(0.999f, 1) in f32 is 1.3e-5,
// ~220 roundings, small). Public for the tests.
Tensor one_minus_power(double beta, Tensor t, Loc loc = Loc::current());
}  // namespace detail

}  // namespace towerjit
