// Exponential moving averages of variables with TensorFlow's ExponentialMovingAverage
// semantics, as update ops that run in the same step as (and read the result of) the apply.
//
// For each variable v, a shadow variable "<v>/ema" (non-trainable, initialised to v's initial
// value) is updated every step:
//   decay  = min(decay, (1 + n) / (10 + n))     when num_updates is used, else decay
//   shadow = shadow - (1 - decay) * (shadow - v_new)
// where v_new is the value v takes this step (after the optimiser's update, when apply() of
// the optimiser was called first) and n the global step after this step's increment (1 on the
// first step), as TF reads global_step under the control dependency on the train op.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dsl/tensor.h"

namespace towerjit {

struct ExponentialMovingAverage {
  double decay = 0.9999;      // the seed's value
  bool num_updates = true;    // clamp the decay by the global step, as the seed does

  // Appends the shadows' update ops for `variables` (default: the trainable variables of the
  // current graph) and returns them. Call it after the optimiser's apply(). Errors: a
  // variable is not an f32 variable, decay is outside [0, 1].
  std::vector<Tensor> apply(std::vector<Tensor> variables = {}, Loc loc = Loc::current()) const;
};

// "<variable>/ema": the shadow of a variable, by full name.
std::string ema_name(const std::string& variable);

// Every variable of `graph` that has a shadow, mapped to the shadow's name.
std::map<std::string, std::string> ema_names(const Graph& graph);

// `values` (a map from variable name to value, e.g. reference::Variables or HostVariables)
// with each averaged variable's value replaced by its shadow's: evaluate with the EMA weights
// by running the eval graph on the result. The training values are left untouched.
template <class Values>
Values with_ema_weights(Values values, const Graph& graph) {
  for (const auto& [variable, shadow] : ema_names(graph)) {
    auto from = values.find(shadow);
    auto to = values.find(variable);
    if (from != values.end() && to != values.end()) to->second = from->second;
  }
  return values;
}

}  // namespace towerjit
