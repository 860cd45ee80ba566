// The apply side cut into one apply per variable, for strategies that keep each variable on a
// device of its own (runtime/towers/placed_variables.h): a variable's apply is the update ops
// of the variable, its optimiser slots ("<variable>/<slot>") and its EMA shadow, which read
// only its own gradient, the gradient scale, that state and the global step. The global step's
// increment is the one update every apply shares; it runs once per apply, after the others.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dsl/tensor.h"

namespace towerjit::detail {

struct CompiledTowers;

struct VariableApply {
  std::string variable;            // a trainable variable
  std::string gradient_input;      // "tower_gradient/<variable>" (a sparse gradient's values)
  std::string rows_input;          // a sparse gradient's rows (CompiledTowers::sparse), else ""
  std::vector<Tensor> updates;     // in the apply's order
  std::vector<std::string> state;  // the variables they write: the variable, its slots, its shadow
};

struct ApplyByVariable {
  std::vector<VariableApply> variables;  // in the gradients' order
  std::vector<Tensor> shared;            // the global step's increment (none without one)
  std::string global_step;               // the variable it writes, or "" without one
};

// Cuts `compiled`'s apply side by variable. Errors (towerjit::Error at `loc`): an apply that
// reads another variable's gradient or state (clip_by_global_norm sums every gradient), or an
// update that belongs to no variable; each says to keep the variables in host memory instead.
ApplyByVariable split_apply_by_variable(const CompiledTowers& compiled, Loc loc);

}  // namespace towerjit::detail
