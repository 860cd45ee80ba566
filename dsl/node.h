// One node of a graph: an op, its inputs, its static shape and dtype, and where the user
// built it. Nodes are immutable once added; passes build new graphs.
#pragma once

#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "dsl/call_stack.h"
#include "dsl/dtype.h"
#include "dsl/op.h"
#include "dsl/shape.h"

namespace towerjit {

// Per-op parameters; each op reads the fields ops.def names for it and ignores the rest.
struct Attrs {
  std::vector<int> axes;              // reduce axes, or the transpose permutation
  bool keepdims = false;
  int axis = 0;                       // concat, argmax
  std::vector<int64_t> begin, end;    // slice bounds, or pad widths
  Shape shape;                        // gradient ops: the shape of the result
  double value = 0;                   // constant
  int64_t depth = 0;                  // one_hot
  int kernel[2] = {1, 1}, stride[2] = {1, 1}, pad[2] = {0, 0};  // conv, pools: (h, w)
  uint64_t seed = 0;                  // random_uniform
  std::string name;                   // input, variable
  // gather: the table's gradient is the dense scatter (GatherGrad) even where the optimiser
  // could apply it sparsely (gather's and embedding's sparse = false; docs/dsl.md).
  bool dense_gradient = false;
  bool causal = false;                // attention: query i sees keys j <= i only
  bool rms = false;                   // layer_norm ops: rms_norm's (no centring, no bias)
  // max_pool2d_grad: zero wherever the pool's input is not > 0, the mask of a ReLU before the
  // pool taken in (jit/passes/mask_pool_grads.h).
  bool relu_mask = false;

  bool operator==(const Attrs&) const = default;
};

struct Node {
  Op op;
  std::vector<int> inputs;
  Shape shape;
  DType dtype = DType::f32;
  Attrs attrs;
  std::source_location loc;
  // The user's frames around `loc` (dsl/call_stack.h); a backward op shares its forward op's.
  std::shared_ptr<const CallStack> stack;
  std::string scope;  // the name scope it was built in ("tower1/fc2"), for errors and dumps
  // A node autodiff built: the forward node whose gradient rule built it (its scope is then
  // "gradients/<the forward node's scope>"); -1 for a forward node.
  int grad_of = -1;
};

}  // namespace towerjit
