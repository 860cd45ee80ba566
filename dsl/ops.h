// The operations of the DSL. Each builds nodes in its operands' graph (leaves in
// Graph::current()), checks shapes and dtypes at once, and remembers the caller's file:line,
// so a mistake is reported where it was written, not when the graph runs.
//
// Shapes follow numpy: elementwise ops broadcast; axes may be negative; an empty axes list
// means every axis. B is the symbolic batch dimension (see shape.h).
#pragma once

#include <string>
#include <vector>

#include "dsl/tensor.h"

namespace towerjit {

// --- Leaves --------------------------------------------------------------------------------
// A value fed at run time under `name`; use kBatch for the batch dimension.
Tensor input(const std::string& name, Shape shape, DType dtype = DType::f32,
             Loc loc = Loc::current());
// `value` broadcast to `shape`, in the current graph.
Tensor constant(double value, Shape shape = {}, DType dtype = DType::f32,
                Loc loc = Loc::current());

// --- Elementwise, one input ----------------------------------------------------------------
Tensor neg(Tensor x, Loc loc = Loc::current());
Tensor exp(Tensor x, Loc loc = Loc::current());
Tensor log(Tensor x, Loc loc = Loc::current());
Tensor sqrt(Tensor x, Loc loc = Loc::current());
Tensor rsqrt(Tensor x, Loc loc = Loc::current());
Tensor abs(Tensor x, Loc loc = Loc::current());
Tensor sign(Tensor x, Loc loc = Loc::current());
Tensor relu(Tensor x, Loc loc = Loc::current());
Tensor sigmoid(Tensor x, Loc loc = Loc::current());
Tensor tanh(Tensor x, Loc loc = Loc::current());
Tensor erf(Tensor x, Loc loc = Loc::current());
Tensor gelu(Tensor x, Loc loc = Loc::current());
Tensor softplus(Tensor x, Loc loc = Loc::current());
Tensor cast(Tensor x, DType dtype, Loc loc = Loc::current());
// The identity forward; no gradient flows back through it.
Tensor stop_gradient(Tensor x, Loc loc = Loc::current());

// --- Elementwise, two or three inputs (broadcasting) ---------------------------------------
Tensor add(Operand a, Operand b, Loc loc = Loc::current());
Tensor sub(Operand a, Operand b, Loc loc = Loc::current());
Tensor mul(Operand a, Operand b, Loc loc = Loc::current());
Tensor div(Operand a, Operand b, Loc loc = Loc::current());
Tensor maximum(Operand a, Operand b, Loc loc = Loc::current());
Tensor minimum(Operand a, Operand b, Loc loc = Loc::current());
Tensor pow(Operand a, Operand b, Loc loc = Loc::current());
// Comparisons: 1 where true, else 0, in the operands' dtype.
Tensor less(Operand a, Operand b, Loc loc = Loc::current());
Tensor less_equal(Operand a, Operand b, Loc loc = Loc::current());
Tensor greater(Operand a, Operand b, Loc loc = Loc::current());
Tensor greater_equal(Operand a, Operand b, Loc loc = Loc::current());
Tensor equal(Operand a, Operand b, Loc loc = Loc::current());
Tensor not_equal(Operand a, Operand b, Loc loc = Loc::current());
// `a` where `cond` is non-zero, else `b`.
Tensor where(Tensor cond, Operand a, Operand b, Loc loc = Loc::current());

// --- Reductions -----------------------------------------------------------------------------
Tensor sum(Tensor x, std::vector<int> axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor mean(Tensor x, std::vector<int> axes = {}, bool keepdims = false,
            Loc loc = Loc::current());
Tensor max(Tensor x, std::vector<int> axes = {}, bool keepdims = false, Loc loc = Loc::current());
// log(sum(exp(x))) over `axes` (all when empty), without overflow: one fused reduction that keeps
// a running maximum. Its gradient is softmax(x) over the same axes.
Tensor logsumexp(Tensor x, std::vector<int> axes = {}, bool keepdims = false,
                 Loc loc = Loc::current());

// --- Layout ---------------------------------------------------------------------------------
// Same elements in a new shape; the batch dimension, if any, must stay a dimension of its own.
Tensor reshape(Tensor x, Shape shape, Loc loc = Loc::current());
// out.dim(i) = x.dim(perm[i]); an empty perm reverses the axes.
Tensor transpose(Tensor x, std::vector<int> perm = {}, Loc loc = Loc::current());
Tensor broadcast_to(Tensor x, Shape shape, Loc loc = Loc::current());
// Elements [begin[i], end[i]) along each axis; a batch axis must be taken whole (0, kBatch).
Tensor slice(Tensor x, std::vector<int64_t> begin, std::vector<int64_t> end,
             Loc loc = Loc::current());
// Zeros before (`low`) and after (`high`) each axis.
Tensor pad(Tensor x, std::vector<int64_t> low, std::vector<int64_t> high, Loc loc = Loc::current());
Tensor concat(const std::vector<Tensor>& xs, int axis, Loc loc = Loc::current());
// `parts` equal pieces along `axis` (the size must divide evenly).
std::vector<Tensor> split(Tensor x, int parts, int axis, Loc loc = Loc::current());
// Pieces of the given sizes along `axis` (they must add up to its size).
std::vector<Tensor> split(Tensor x, std::vector<int64_t> sizes, int axis, Loc loc = Loc::current());

// --- Neural network ops ---------------------------------------------------------------------
// [..., M, K] x [..., K, N] -> [..., M, N]; 2-D or batched with broadcast batch dimensions.
Tensor matmul(Tensor a, Tensor b, Loc loc = Loc::current());
// i32 indices -> f32 [..., depth]. An index outside [0, depth) is an error when the graph runs.
Tensor one_hot(Tensor indices, int64_t depth, Loc loc = Loc::current());
Tensor argmax(Tensor x, int axis = -1, Loc loc = Loc::current());
// exp(x - max) / sum(exp(x - max)) along `axis`. Over the last axis it is one fused op: one
// kernel (a CPU routine, a CUDA kernel) forward and one backward, d x = y (d y - sum(y d y)),
// where the composed form takes two each; over another axis, or with `fused = false`, it is
// composed of a log-sum-exp and exp(x - lse), into whose kernels a producer of x (a mask, a
// scale) fuses rather than writing x first.
struct SoftmaxOptions {
  int axis = -1;
  bool fused = true;
};
Tensor softmax(Tensor x, int axis = -1, Loc loc = Loc::current());
Tensor softmax(Tensor x, SoftmaxOptions options, Loc loc = Loc::current());
Tensor log_softmax(Tensor x, int axis = -1, Loc loc = Loc::current());
// Per-example loss -sum(p * log_softmax(logits)) over the last axis. `labels` is either i32
// class indices (shape of logits without its last axis) or f32 probabilities (shape of logits).
Tensor softmax_cross_entropy(Tensor logits, Tensor labels, Loc loc = Loc::current());

struct Conv2DOptions {
  int stride = 1;
  int pad = 0;  // zeros on each side of H and W
};
// x [N, C, H, W] (NCHW), w [O, C, KH, KW] -> [N, O, (H + 2 pad - KH) / stride + 1, ...].
Tensor conv2d(Tensor x, Tensor w, Conv2DOptions options = {}, Loc loc = Loc::current());

struct Pool2DOptions {
  int kernel = 2;
  int stride = 0;  // 0: the kernel size
  int pad = 0;
};
Tensor max_pool2d(Tensor x, Pool2DOptions options = {}, Loc loc = Loc::current());
Tensor avg_pool2d(Tensor x, Pool2DOptions options = {}, Loc loc = Loc::current());

// sum(x^2) / 2, TF's l2_loss; of a list, the sum over the list.
Tensor l2_loss(Tensor x, Loc loc = Loc::current());
Tensor l2_loss(const std::vector<Tensor>& xs, Loc loc = Loc::current());

// Uniform [0, 1) numbers shaped like `like`, from Philox keyed by (seed, node, element, step).
Tensor random_uniform_like(Tensor like, uint64_t seed, Loc loc = Loc::current());

// Update op: `value` becomes the next value of `variable` when the graph's updates run.
// Registered in the graph's update ops.
Tensor assign(Tensor variable, Tensor value, Loc loc = Loc::current());

}  // namespace towerjit
