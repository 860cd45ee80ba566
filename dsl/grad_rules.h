// The gradient rule of every op of ops.def: how autodiff turns the gradient of a node's output
// into the gradients of its inputs. Internal to dsl/ (autodiff.cpp is the only caller).
#pragma once

#include <vector>

#include "dsl/ops_internal.h"

namespace towerjit::detail {

// What a rule sees of one forward node. The node is a copy: the graph grows while rules run, so
// references into it would dangle.
struct GradContext {
  Graph& graph;
  Node node;               // the forward node
  Tensor y;                // its output
  std::vector<Tensor> x;   // its inputs, in order
  Tensor dy;               // d loss / d y, of y's shape
  std::vector<bool> want;  // want[k]: build d loss / d x[k]
  Loc grad_loc;            // where grad() was called, for errors

  Shape in_shape(int k) const { return x[k].shape(); }  // by value, see above
  Loc loc() const { return node.loc; }                  // gradient nodes point at user code
};

// Whether a gradient flows from `node`'s output to its input number `k`. False for leaves, for
// ops piecewise constant in that input or not a function of its values (comparisons, sign,
// argmax, one_hot, count, random_uniform, the condition of select), stop_gradient, casts to or
// from i32, assign, and every node that is not f32.
bool passes_gradient(const Graph& graph, const Node& node, int k);

// d loss / d x[k] for each k with want[k], each of exactly x[k]'s shape; the other entries are
// empty tensors. Throws towerjit::Error for an op without a gradient (the gradient-only
// primitives: no second derivatives of conv2d and pooling).
std::vector<Tensor> backward(const GradContext& c);

// The two halves of backward(), one per file: elementwise ops and reductions, and the rest
// (layout, matmul, convolution, pooling). Each returns false when `c.node.op` is not its own.
bool backward_elementwise(const GradContext& c, std::vector<Tensor>& dx);
bool backward_structural(const GradContext& c, std::vector<Tensor>& dx);

// Sums `g` over the axes that broadcasting added or stretched, so it takes `shape` (a shape that
// broadcasts to g's): the gradient of an operand that was broadcast.
Tensor unbroadcast(Tensor g, const Shape& shape, Loc loc);

}  // namespace towerjit::detail
