// Reverse-mode automatic differentiation as a graph transformation: grad() appends the
// backward nodes to the loss's graph, so gradients are fused and compiled like any other node.
#pragma once

#include <vector>

#include "dsl/tensor.h"

namespace towerjit {

// d loss / d x for each x in `wrt` (variables or any other f32 tensor of the graph). `loss` must
// be an f32 scalar. A tensor the loss does not depend on gets a zero gradient of its shape.
std::vector<Tensor> grad(Tensor loss, const std::vector<Tensor>& wrt, Loc loc = Loc::current());

}  // namespace towerjit
