// Internal to the reference interpreter: what one node's evaluation sees, the per-op
// evaluation functions interpreter.cpp dispatches to, and the index helpers they share.
#pragma once

#include <cstdint>
#include <vector>

#include "dsl/node.h"
#include "jit/reference/array.h"

namespace towerjit::reference {

// One node to evaluate: the node, its input values (in the node's input order), its concrete
// output shape, the bound batch size and the training step.
struct EvalArgs {
  const Node& node;
  std::vector<const Array*> inputs;
  Shape shape;         // node.shape with the batch bound
  int64_t batch = 0;   // the bound batch size (0 when no input fixed it)
  uint64_t step = 0;   // RunOptions::step
  bool tf32_products = false;  // RunOptions::tf32_products: bound products and convolutions as TF32

  const Array& in(int i) const { return *inputs.at(i); }
  // An empty result of the node's shape and dtype.
  Array result() const { return Array(shape, node.dtype); }
};

// --- Index helpers (array.cpp) ---------------------------------------------------------------
// The multi-index of row-major element `flat` of `shape`.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape);
// The row-major element number of multi-index `index` in a shape with `strides`.
int64_t ravel(const std::vector<int64_t>& index, const std::vector<int64_t>& strides);
// The element of `in` that numpy broadcasting maps output multi-index `out_index` to: axes are
// aligned on the right and a dimension of 1 always reads element 0.
int64_t broadcast_index(const Shape& in, const std::vector<int64_t>& out_index);
// The first `count` dimensions of `shape` (matmul's batch dimensions).
Shape leading_dims(const Shape& shape, int count);

// --- eval_elementwise.cpp -------------------------------------------------------------------
Array eval_constant(const EvalArgs& a);
Array eval_unary(const EvalArgs& a);   // every Unary op of ops.def, Cast and StopGradient
Array eval_binary(const EvalArgs& a);  // every Binary op of ops.def
Array eval_select(const EvalArgs& a);

// --- eval_layout.cpp ------------------------------------------------------------------------
Array eval_reduce(const EvalArgs& a);  // ReduceSum, ReduceMean, ReduceMax, ReduceLogSumExp
Array eval_count(const EvalArgs& a);
Array eval_reshape(const EvalArgs& a);
Array eval_transpose(const EvalArgs& a);
Array eval_broadcast_to(const EvalArgs& a);
Array eval_slice(const EvalArgs& a);
Array eval_pad(const EvalArgs& a);
Array eval_concat(const EvalArgs& a);

// --- eval_nn.cpp ----------------------------------------------------------------------------
Array eval_matmul(const EvalArgs& a);
Array eval_one_hot(const EvalArgs& a);
Array eval_argmax(const EvalArgs& a);
Array eval_random_uniform(const EvalArgs& a);
Array eval_assign(const EvalArgs& a);

// --- eval_sequence.cpp ----------------------------------------------------------------------
Array eval_iota(const EvalArgs& a);
Array eval_gather(const EvalArgs& a);
Array eval_gather_grad(const EvalArgs& a);
Array eval_combine_rows(const EvalArgs& a);
Array eval_scatter_rows(const EvalArgs& a);

// --- eval_attention.cpp ---------------------------------------------------------------------
Array eval_attention(const EvalArgs& a);
Array eval_attention_grad_q(const EvalArgs& a);
Array eval_attention_grad_kv(const EvalArgs& a);
// Their error bounds (error_bounds.cpp's analysis), beside the evaluations they bound.
Array attention_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, const Array& y);
Array attention_grad_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, const Array& y);

// --- eval_norm.cpp: layer norm and softmax ------------------------------------------------
Array eval_layer_norm(const EvalArgs& a);
Array eval_layer_norm_grad_input(const EvalArgs& a);
Array eval_layer_norm_grad_params(const EvalArgs& a);
// The bound of any of the three, from its input bounds and its exact value.
Array layer_norm_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, const Array& y);
Array eval_softmax(const EvalArgs& a);
Array eval_softmax_grad(const EvalArgs& a);
Array softmax_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, const Array& y);

// --- eval_conv.cpp --------------------------------------------------------------------------
Array eval_conv2d(const EvalArgs& a);
Array eval_conv2d_grad_input(const EvalArgs& a);
Array eval_conv2d_grad_filter(const EvalArgs& a);
Array eval_max_pool2d(const EvalArgs& a);
Array eval_max_pool2d_grad(const EvalArgs& a);
Array eval_avg_pool2d(const EvalArgs& a);
Array eval_avg_pool2d_grad(const EvalArgs& a);
// The error bound of a max pool's gradient (see error_bounds.cpp), beside the routing it bounds.
Array max_pool2d_grad_bound(const EvalArgs& a, const Array& x_bound, const Array& dy_bound);

// --- error_bounds.cpp -----------------------------------------------------------------------
// A bound on how far a float32 backend's value of node `a` may lie from `value`, the exact value
// just evaluated, given the bounds of its inputs (in input order).
Array error_bound(const EvalArgs& a, const std::vector<const Array*>& input_bounds, const Array& value);
// The bound on the relative rounding error of an n-term float32 sum or dot product in any
// order, relative to the sum of its terms' magnitudes: Higham's gamma_n = n u / (1 - n u),
// u = 2^-24, or where smaller its probabilistic counterpart (error_bounds.cpp).
double rounding_gamma(double n);
// The bound on the relative error of an n-term dot product on TF32 tensor cores (the inputs
// rounded to a 10-bit mantissa, the products summed in f32; error_bounds.cpp), relative to the
// sum of its terms' magnitudes.
double tf32_dot_gamma(double n);
// What rounding to float32 does to each element: inputs, variables and constants held in double
// reach a float32 backend rounded.
Array float_rounding_bound(const Array& value);

}  // namespace towerjit::reference
