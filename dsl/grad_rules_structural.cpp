// Gradient rules of the layout ops, matmul, convolution and pooling. Layout gradients move the
// gradient back where the elements came from; the batch axis B is always taken whole.
#include <string>
#include <tuple>
#include <utility>

#include "dsl/grad_rules.h"

namespace towerjit::detail {
namespace {

// The whole of an axis, in slice()'s terms: (0, kBatch) for the batch.
std::pair<int64_t, int64_t> whole(int64_t dim) { return {0, dim == kBatch ? kBatch : dim}; }

Tensor transpose_grad(const GradContext& c) {
  std::vector<int> perm = c.node.attrs.axes, inverse(perm.size());
  // out[i] = in[perm[i]], so in[j] = out[inverse[j]] with inverse[perm[i]] = i.
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int>(i);
  return transpose(c.dy, inverse, c.loc());
}

Tensor slice_grad(const GradContext& c) {
  const Shape xs = c.in_shape(0);
  std::vector<int64_t> low(xs.rank()), high(xs.rank());
  for (int i = 0; i < xs.rank(); ++i) {
    if (xs[i] == kBatch) {  // taken whole: nothing to pad
      // Only batch norm's shift slices the batch axis (dsl/layers.cpp), behind stop_gradient.
      internal_check(c.node.shape[i] == kBatch)
          << "a slice of part of the batch axis differentiated (" << c.y.shape().str() << ")";
      continue;
    }
    low[i] = c.node.attrs.begin[i];
    high[i] = xs[i] - c.node.attrs.end[i];
  }
  return pad(c.dy, low, high, c.loc());
}

Tensor pad_grad(const GradContext& c) {
  const Shape xs = c.in_shape(0);
  std::vector<int64_t> begin(xs.rank()), end(xs.rank());
  for (int i = 0; i < xs.rank(); ++i) {
    std::tie(begin[i], end[i]) = whole(xs[i]);
    if (xs[i] == kBatch) continue;  // never padded
    begin[i] = c.node.attrs.begin[i];
    end[i] = begin[i] + xs[i];
  }
  return slice(c.dy, begin, end, c.loc());
}

void concat_grad(const GradContext& c, std::vector<Tensor>& dx) {
  const int axis = c.node.attrs.axis;
  const Shape ys = c.y.shape();
  int64_t offset = 0;
  for (size_t k = 0; k < c.x.size(); ++k) {
    const Shape xs = c.in_shape(static_cast<int>(k));
    if (c.want[k]) {
      std::vector<int64_t> begin(ys.rank()), end(ys.rank());
      for (int i = 0; i < ys.rank(); ++i) std::tie(begin[i], end[i]) = whole(ys[i]);
      begin[axis] = offset;
      end[axis] = offset + xs[axis];
      dx[k] = slice(c.dy, begin, end, c.loc());
    }
    offset += xs[axis];
  }
}

// x with its last two axes swapped.
Tensor swap_last(Tensor x, Loc loc) {
  std::vector<int> perm(x.rank());
  for (int i = 0; i < x.rank(); ++i) perm[i] = i;
  std::swap(perm[x.rank() - 1], perm[x.rank() - 2]);
  return transpose(x, perm, loc);
}

void matmul_grad(const GradContext& c, std::vector<Tensor>& dx) {
  const Loc loc = c.loc();
  const Tensor a = c.x[0], b = c.x[1];
  // With bf16 or f16 operands the backward products take them too: dy is rounded to the
  // operands' dtype and each product accumulates in f32, giving f32 gradients (as the forward).
  const Tensor dy = cast(c.dy, a.dtype(), loc);
  // Broadcast batch dimensions of an operand are summed back by unbroadcast.
  if (c.want[0]) dx[0] = unbroadcast(matmul(dy, swap_last(b, loc), loc), c.in_shape(0), loc);
  if (c.want[1]) dx[1] = unbroadcast(matmul(swap_last(a, loc), dy, loc), c.in_shape(1), loc);
}

// A gradient-only primitive with `inputs`, of the shape `shape`, keeping the forward node's
// kernel, stride and pad.
Tensor primitive(const GradContext& c, Op op, std::vector<int> inputs, const Shape& shape) {
  Attrs attrs = c.node.attrs;
  attrs.shape = shape;
  return make(c.graph, op, std::move(inputs), shape, DType::f32, attrs, c.loc());
}

// "conv2d_grad_input" -> "conv2d": the forward op the user wrote.
std::string forward_name(Op op) {
  const std::string name(op_name(op));
  return name.substr(0, name.find("_grad"));
}

[[noreturn]] void no_second_derivative(const GradContext& c) {
  const std::string fwd = forward_name(c.node.op);
  user_check(false, c.grad_loc)
      << "grad: second derivatives of " << fwd << " are not supported: the loss depends, "
      << "through a tensor to differentiate, on the gradient " << c.y.describe() << " of the "
      << fwd << " at " << format_location(c.loc()) << "; build the loss from forward ops "
      << "only, or wrap that gradient in stop_gradient()";
  throw Error("unreachable");  // user_check(false) has thrown already
}

// The fused attention's gradients recompute the probabilities from q, k and the saved
// log-sum-exp (the forward's last column, read from y): dq by query rows, dk and dv together
// by key rows ([..., Tk, d + dv], split here), so neither kernel sums across threads.
void attention_grad(const GradContext& c, std::vector<Tensor>& dx) {
  const std::vector<int> in = {c.x[0].id(), c.x[1].id(), c.x[2].id(), c.y.id(), c.dy.id()};
  if (c.want[0]) dx[0] = primitive(c, Op::AttentionGradQ, in, c.in_shape(0));
  if (!c.want[1] && !c.want[2]) return;
  const Shape ks = c.in_shape(1);
  const int r = ks.rank();
  const int64_t d = ks[r - 1], dv = c.in_shape(2)[r - 1];
  std::vector<int64_t> dims = ks.dims();
  dims.back() = d + dv;
  const Tensor kv = primitive(c, Op::AttentionGradKV, in, Shape(dims));
  std::vector<int64_t> begin(r, 0), end = dims;
  for (int i = 0; i < r; ++i)
    if (dims[i] == kBatch) end[i] = kBatch;
  end.back() = d;
  if (c.want[1]) dx[1] = slice(kv, begin, end, c.loc());
  begin.back() = d;
  end.back() = d + dv;
  if (c.want[2]) dx[2] = slice(kv, begin, end, c.loc());
}

// The fused layer norm's gradients recompute each row's statistics from x (nothing else was
// stored): d x by row blocks, and the gain's and bias' sums over the rows as one [2, F]
// ([1, F] for rms) whose rows are split here.
void layer_norm_grad(const GradContext& c, std::vector<Tensor>& dx) {
  const Loc loc = c.loc();
  if (c.want[0]) dx[0] = primitive(c, Op::LayerNormGradInput, {c.x[0].id(), c.x[1].id(), c.dy.id()}, c.in_shape(0));
  const bool bias = c.x.size() > 2;
  if (!c.want[1] && !(bias && c.want[2])) return;
  const int64_t f = c.in_shape(1)[0];
  const Tensor params = primitive(c, Op::LayerNormGradParams, {c.x[0].id(), c.dy.id()}, Shape{bias ? 2 : 1, f});
  if (!bias) {
    dx[1] = reshape(params, {f}, loc);
    return;
  }
  if (c.want[1]) dx[1] = reshape(slice(params, {0, 0}, {1, f}, loc), {f}, loc);
  if (c.want[2]) dx[2] = reshape(slice(params, {1, 0}, {2, f}, loc), {f}, loc);
}

// The fused softmax's gradient reads its output y, which the forward stores anyway:
// d x = y (d y - sum(y d y)) per row, one fused op. That op is linear in d y, with the same
// form as its gradient there; its gradient in y (second derivatives) is written out,
// g (d y - sum(y d y)) - d y sum(g y), from primitives.
void softmax_grad(const GradContext& c, std::vector<Tensor>& dx) {
  if (c.want[0]) dx[0] = primitive(c, Op::SoftmaxGrad, {c.y.id(), c.dy.id()}, c.in_shape(0));
}

void softmax_grad_grad(const GradContext& c, std::vector<Tensor>& dx) {
  const Loc loc = c.loc();
  const Tensor &y = c.x[0], &dy = c.x[1], &g = c.dy;
  const int last = y.rank() - 1;
  if (c.want[1]) dx[1] = primitive(c, Op::SoftmaxGrad, {y.id(), g.id()}, c.in_shape(1));
  if (c.want[0])
    dx[0] = sub(mul(g, sub(dy, sum(mul(y, dy, loc), {last}, true, loc), loc), loc),
                mul(dy, sum(mul(g, y, loc), {last}, true, loc), loc), loc);
}

}  // namespace

bool backward_structural(const GradContext& c, std::vector<Tensor>& dx) {
  const Loc loc = c.loc();
  const Tensor g = c.dy;
  switch (c.node.op) {
    case Op::Reshape: dx[0] = reshape(g, c.in_shape(0), loc); return true;
    case Op::Transpose: dx[0] = transpose_grad(c); return true;
    case Op::BroadcastTo: dx[0] = unbroadcast(g, c.in_shape(0), loc); return true;
    case Op::Slice: dx[0] = slice_grad(c); return true;
    case Op::Pad: dx[0] = pad_grad(c); return true;
    case Op::Concat: concat_grad(c, dx); return true;
    case Op::MatMul: matmul_grad(c, dx); return true;
    case Op::Conv2D:
      if (c.want[0]) dx[0] = primitive(c, Op::Conv2DGradInput, {g.id(), c.x[1].id()}, c.in_shape(0));
      if (c.want[1]) dx[1] = primitive(c, Op::Conv2DGradFilter, {c.x[0].id(), g.id()}, c.in_shape(1));
      return true;
    case Op::MaxPool2D:
      dx[0] = primitive(c, Op::MaxPool2DGrad, {c.x[0].id(), g.id()}, c.in_shape(0));
      return true;
    case Op::AvgPool2D:
      dx[0] = primitive(c, Op::AvgPool2DGrad, {g.id()}, c.in_shape(0));
      return true;
    // A gather's gradient is the rows it read (its indices) and the values dy: GatherGrad holds
    // the pair (dsl/sparse_gradients.h), which the optimiser applies row by row; the node's own
    // value, their dense sum into a table-shaped zero, is computed only if something reads it.
    case Op::Gather:
      dx[0] = primitive(c, Op::GatherGrad, {c.x[1].id(), g.id()}, c.in_shape(0));
      return true;
    case Op::GatherGrad: {  // linear in dy: its gradient gathers the same rows back
      Attrs attrs = c.node.attrs;
      attrs.shape = Shape{};
      dx[1] = make(c.graph, Op::Gather, {g.id(), c.x[0].id()}, c.in_shape(1), DType::f32, attrs, loc);
      return true;
    }
    case Op::Attention: attention_grad(c, dx); return true;
    case Op::LayerNorm: layer_norm_grad(c, dx); return true;
    case Op::Softmax: softmax_grad(c, dx); return true;
    case Op::SoftmaxGrad: softmax_grad_grad(c, dx); return true;
    case Op::Conv2DGradInput: case Op::Conv2DGradFilter: case Op::MaxPool2DGrad:
    case Op::AvgPool2DGrad: case Op::AttentionGradQ: case Op::AttentionGradKV:
    case Op::LayerNormGradInput: case Op::LayerNormGradParams:
      no_second_derivative(c);
    default:
      return false;
  }
}

}  // namespace towerjit::detail
