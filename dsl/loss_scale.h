// Dynamic loss scaling, for f16 matrix products (bf16 has f32's exponent range and needs none):
// the loss is multiplied by a scale before autodiff, so small gradients survive f16's range
// (its smallest subnormal is 2^-24), and the apply divides the gradients by it again. A step
// whose gradients hold an infinity or a NaN (the scale was too large) is skipped and the
// scale halved; after `growth_interval` finite steps in a row it doubles. These are PyTorch's
// GradScaler semantics, built into the apply as TF's LossScaleOptimizer is:
//
//   auto opt = tj::adam(1e-3).with_loss_scale();            // 2^16, x2 every 2000, x0.5
//   tj::TowerTrainer trainer(graph, loss, towers, opt);      // the trainer scales the loss
//
// The state is three non-trainable f32 scalars, saved in checkpoints with the rest (so a
// resumed run goes on bitwise): kScale, kGoodSteps (finite steps since the scale last changed)
// and kSkippedSteps (every skipped step so far). The global step counts skipped steps too, as
// TF's does; so Adam's bias correction does (PyTorch's skipped optimizer.step() would not).
#pragma once

#include <cstdint>
#include <vector>

#include "dsl/tensor.h"

namespace towerjit {

struct DynamicLossScale {
  double initial = 65536;      // 2^16, GradScaler's init_scale
  double growth_factor = 2;    // > 1
  double backoff_factor = 0.5; // in (0, 1)
  int64_t growth_interval = 2000;  // >= 1 finite steps in a row before the scale grows

  static constexpr const char* kScale = "loss_scale/scale";
  static constexpr const char* kGoodSteps = "loss_scale/good_steps";
  static constexpr const char* kSkippedSteps = "loss_scale/skipped_steps";
};

namespace detail {

// Errors (towerjit::Error at `loc`) for a factor or interval out of its range.
void check_loss_scale(const DynamicLossScale& s, Loc loc);

// `loss` times the scale variable kScale (created at s.initial in the loss's graph).
Tensor scale_loss(Tensor loss, const DynamicLossScale& s, Loc loc);

// The apply's first part: `grads` (of the scaled loss) divided by the scale, and `finite`, an
// f32 scalar, 1 when every one of them is finite and else 0. Appends the scale's own update
// ops to `out`: backed off and the skip counted when not finite, grown after growth_interval
// finite steps. The optimiser's updates are then gated by `finite` (skipped when it is 0).
struct UnscaledGradients {
  std::vector<Tensor> grads;
  Tensor finite;
};
UnscaledGradients unscale_gradients(const std::vector<Tensor>& grads, const DynamicLossScale& s,
                                    std::vector<Tensor>& out, Loc loc);

}  // namespace detail
}  // namespace towerjit
