// Learning-rate schedules as tensor expressions of the global step, built in the graph at
// apply time so the rate is computed inside the fused apply kernels (no host round trip).
//
// Every schedule follows TensorFlow's definition of the same name, with `step` the global
// step read at the start of the training step (0 for the first update), as TF's optimisers
// read it before apply_gradients increments it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "dsl/tensor.h"

namespace towerjit {

// A learning rate: a number, or a function of the step. A plain float converts implicitly, so
// an optimiser takes `0.1f` or `exponential_decay(...)` in the same place.
class Schedule {
 public:
  // Builds the rate at `step` (an f32 scalar tensor) in step's graph.
  using Build = std::function<Tensor(Tensor step)>;

  Schedule(double value, Loc loc = Loc::current());  // NOLINT: implicit on purpose
  Schedule(std::string description, Build build);

  // The rate at `step`, an f32 scalar of step's graph. Errors unless step is an f32 scalar.
  Tensor at(Tensor step, Loc loc = Loc::current()) const;
  // "exponential_decay(lr0=0.1, decay_steps=100, rate=0.5, staircase=true)".
  const std::string& str() const { return description_; }

 private:
  std::string description_;
  Build build_;
};

// `value` at every step.
Schedule constant_schedule(double value, Loc loc = Loc::current());

// lr0 * rate^(step / decay_steps); with `staircase`, the exponent is floor(step / decay_steps).
Schedule exponential_decay(double lr0, double decay_steps, double rate, bool staircase = false,
                           Loc loc = Loc::current());

// values[0] while step <= boundaries[0], values[i] while boundaries[i-1] < step <=
// boundaries[i], values[n] once step > boundaries[n-1]. Boundaries strictly increase and
// values has one more entry than boundaries.
Schedule piecewise_constant(std::vector<double> boundaries, std::vector<double> values,
                            Loc loc = Loc::current());

// lr0 * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, decay_steps) / decay_steps)) + alpha):
// from lr0 down to alpha * lr0 at decay_steps, then flat.
Schedule cosine_decay(double lr0, double decay_steps, double alpha = 0, Loc loc = Loc::current());

// after(step) * min(1, (step + 1) / warmup_steps): the first update (step 0) uses
// 1 / warmup_steps of the rate, update k uses (k + 1) / warmup_steps, and from step
// warmup_steps - 1 on the rate is after's own. `after` sees the unshifted step.
Schedule linear_warmup(Schedule after, double warmup_steps, Loc loc = Loc::current());

}  // namespace towerjit
