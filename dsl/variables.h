// Variables and the collections the seed designs rely on. A variable is found or created by
// its full name (scope path + name), TF's get_variable: inside a scope with reuse, building a
// layer again returns the same variables, which is how towers share their weights.
#pragma once

#include <string>
#include <vector>

#include "dsl/initializer.h"
#include "dsl/tensor.h"

namespace towerjit {

struct VariableOptions {
  Initializer init = towerjit::init::glorot_uniform();
  bool trainable = true;
  DType dtype = DType::f32;
};

// Creates "<scope>/<name>" in the current graph, or returns it when the scope reuses.
// Errors: the name exists and reuse is off; reuse is on and it does not exist; it exists with
// another shape or dtype. `shape` may not contain the batch dimension.
Tensor variable(const std::string& name, Shape shape, VariableOptions options = {},
                Loc loc = Loc::current());

// The collections of the current graph.
std::vector<Tensor> trainable_variables();
std::vector<Tensor> global_variables();
std::vector<Tensor> update_ops();
std::vector<Tensor> regularization_losses();
void add_regularization_loss(Tensor loss, Loc loc = Loc::current());

}  // namespace towerjit
