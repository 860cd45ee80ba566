// Gradient rules of the elementwise ops and reductions, and the dispatch over all rules.
// Every node built here carries the forward node's location, so a dump of the backward graph
// points at the user line whose gradient it computes.
#include <cmath>
#include <numbers>

#include "dsl/grad_rules.h"

namespace towerjit::detail {

bool passes_gradient(const Graph& graph, const Node& node, int k) {
  // Integers carry no gradient; this also stops casts to i32, argmax and i32 arithmetic. A bf16
  // or f16 node passes one, held in f32 (gradients are f32 tensors whatever the node stores).
  if (!is_real(node.dtype)) return false;
  if (op_is_comparison(node.op)) return false;
  switch (node.op) {
    case Op::Input: case Op::Variable: case Op::Constant: case Op::Iota:
    case Op::Sign: case Op::StopGradient: case Op::Count: case Op::OneHot: case Op::ArgMax:
    case Op::RandomUniform: case Op::Assign: case Op::AllReduce:
    case Op::CombineRows: case Op::ScatterRows:  // the optimiser's sparse apply
      return false;
    case Op::Cast:  // between f32, bf16 and f16 it passes; i32 -> f32 starts from integers
      return is_real(graph.node(node.inputs[k]).dtype);
    case Op::Select:
      return k != 0;  // the condition only picks
    case Op::PhaseSelect:
      return k == 0;  // a program is differentiated as it trains
    case Op::Gather:
      return k == 0;  // the indices only pick
    case Op::GatherGrad:
      return k == 1;
    default:
      return true;
  }
}

Tensor unbroadcast(Tensor g, const Shape& shape, Loc loc) {
  if (g.shape() == shape) return g;
  // Two sums, never a reshape: axes broadcasting prepended go away, stretched ones stay as 1.
  // That leaves exactly `shape`, B included, without asking reshape to move the batch.
  const int lead = g.rank() - shape.rank();
  std::vector<int> leading;
  for (int i = 0; i < lead; ++i) leading.push_back(i);
  if (!leading.empty()) g = sum(g, leading, false, loc);
  std::vector<int> stretched;
  for (int i = 0; i < shape.rank(); ++i)
    if (shape[i] == 1 && g.shape()[i] != 1) stretched.push_back(i);
  if (!stretched.empty()) g = sum(g, stretched, true, loc);
  internal_check(g.shape() == shape) << "unbroadcast to " << shape.str() << " gave "
                                     << g.shape().str();
  return g;
}

namespace {

// d y / d x times g for the one-input ops; y is the forward output, reused where the
// derivative is cheapest in terms of it (exp, sqrt, sigmoid, tanh).
Tensor unary_grad(const GradContext& c) {
  const Loc loc = c.loc();
  const Tensor g = c.dy, x = c.x[0], y = c.y;
  auto k = [&](double v) { return Operand(v, loc); };
  switch (c.node.op) {
    case Op::Neg: return neg(g, loc);
    case Op::Exp: return mul(g, y, loc);
    case Op::Log: return div(g, x, loc);
    case Op::Sqrt: return div(mul(g, k(0.5), loc), y, loc);
    case Op::Rsqrt: return mul(mul(g, k(-0.5), loc), mul(mul(y, y, loc), y, loc), loc);
    case Op::Abs: return mul(g, sign(x, loc), loc);
    // relu(x) > 0 exactly where x > 0; masking on the output lets the forward kernel keep
    // only the activation, not the pre-activation too.
    case Op::Relu: return where(greater(y, k(0), loc), g, k(0), loc);
    case Op::Sigmoid: return mul(g, mul(y, sub(k(1), y, loc), loc), loc);
    case Op::Tanh: return mul(g, sub(k(1), mul(y, y, loc), loc), loc);
    case Op::Erf: {
      Tensor bump = exp(neg(mul(x, x, loc), loc), loc);
      return mul(g, mul(bump, k(2 / std::sqrt(std::numbers::pi)), loc), loc);
    }
    // d/dx [x Phi(x)] = Phi(x) + x phi(x), Phi and phi the normal cdf and density: one node,
    // whose backends share e^(-x²/2) between erf's tail and phi (as separate erf and exp
    // nodes, gpt-small's two GELU gradients were 1.2 ms of its 15 ms CPU step).
    case Op::Gelu: return mul(g, make(c.graph, Op::GeluGrad, {x.id()}, x.shape(), x.dtype(), {}, loc), loc);
    case Op::GeluGrad:  // d/dx [Phi(x) + x phi(x)] = phi(x) (2 - x²)
      return mul(g, mul(exp(mul(mul(x, x, loc), k(-0.5), loc), loc),
                        mul(sub(k(2), mul(x, x, loc), loc), k(1 / std::sqrt(2 * std::numbers::pi)), loc), loc),
                 loc);
    case Op::Softplus: return mul(g, sigmoid(x, loc), loc);
    case Op::Cast: return g;  // between real dtypes only (passes_gradient); g is f32 either way
    default:
      internal_check(false) << "no unary gradient rule for " << op_name(c.node.op);
      return g;
  }
}

// Gradients of the two-input ops before unbroadcasting: each has the output's shape.
void binary_grad(const GradContext& c, Tensor& ga, Tensor& gb) {
  const Loc loc = c.loc();
  const Tensor g = c.dy, a = c.x[0], b = c.x[1], y = c.y;
  auto k = [&](double v) { return Operand(v, loc); };
  switch (c.node.op) {
    case Op::Add: ga = g; gb = g; return;
    case Op::Sub: ga = g; if (c.want[1]) gb = neg(g, loc); return;
    case Op::Mul:
      if (c.want[0]) ga = mul(g, b, loc);
      if (c.want[1]) gb = mul(g, a, loc);
      return;
    case Op::Div: {
      // d/db (a / b) = -(a / b) / b = -y / b, so g / b serves both sides.
      Tensor g_b = div(g, b, loc);
      ga = g_b;
      if (c.want[1]) gb = neg(mul(g_b, y, loc), loc);
      return;
    }
    case Op::Max: case Op::Min: {
      // The gradient goes to the side the forward op picked: a on ties (a >= b for max, a <= b
      // for min) and a NaN, which is the result (a NaN a counts as picked, a != a; a NaN b
      // already fails the comparison). So a NaN dy reaches the NaN input, never a finite one.
      Tensor picks = c.node.op == Op::Max ? greater_equal(a, b, loc) : less_equal(a, b, loc);
      Tensor to_a = where(not_equal(a, a, loc), k(1), picks, loc);
      if (c.want[0]) ga = where(to_a, g, k(0), loc);
      if (c.want[1]) gb = where(to_a, k(0), g, loc);
      return;
    }
    case Op::Pow: {
      // PyTorch's pow_backward_self / pow_backward_exponent, masks included: where b = 0 the
      // base's gradient is 0 (not b a^(b-1) = 0 * inf at a = 0), and where a = 0 with b >= 0
      // the exponent's is 0 (not y log a = 0 * -inf, or -inf at 0^0). A constant operand that
      // can never need its mask (pow(x, 2), pow(2, x)) gets none, as PyTorch's scalar forms.
      auto may_be = [](const Tensor& t, double v) {
        return t.node().op != Op::Constant || t.node().attrs.value == v;
      };
      if (c.want[0]) {
        ga = mul(g, mul(b, pow(a, sub(b, k(1), loc), loc), loc), loc);
        if (may_be(b, 0)) ga = where(equal(b, k(0), loc), k(0), ga, loc);
      }
      // log(a) is NaN for a < 0, so this side is built only when b needs a gradient.
      if (c.want[1]) {
        Tensor dyb = mul(y, log(a, loc), loc);
        if (may_be(a, 0))
          dyb = where(mul(equal(a, k(0), loc), greater_equal(b, k(0), loc), loc), k(0), dyb, loc);
        gb = mul(g, dyb, loc);  // outside the mask, as PyTorch: a NaN g stays NaN
      }
      return;
    }
    default:
      internal_check(false) << "no binary gradient rule for " << op_name(c.node.op);
  }
}

// g of a reduction's output, reshaped to the keepdims form, so it broadcasts against x.
Tensor keep_reduced_dims(const GradContext& c, Tensor g) {
  if (c.node.attrs.keepdims) return g;
  Shape kept = c.in_shape(0);
  for (int axis : c.node.attrs.axes) kept[axis] = 1;
  return reshape(g, kept, c.loc());
}

Tensor reduce_grad(const GradContext& c) {
  const Loc loc = c.loc();
  const Shape xs = c.in_shape(0);
  const std::vector<int>& axes = c.node.attrs.axes;
  Tensor g = keep_reduced_dims(c, c.dy);
  switch (c.node.op) {
    case Op::ReduceSum:
      return broadcast_to(g, xs, loc);
    case Op::ReduceMean: {
      bool batch = false;
      int64_t n = 1;
      for (int axis : axes) {
        batch = batch || xs[axis] == kBatch;
        n *= xs[axis] == kBatch ? 1 : xs[axis];
      }
      if (!batch) return broadcast_to(mul(g, Operand(1.0 / n, loc), loc), xs, loc);
      // The batch is known only when the graph runs; Count reads it then.
      Attrs attrs;
      attrs.axes = axes;
      Tensor count = make(c.graph, Op::Count, {c.x[0].id()}, Shape{}, DType::f32, attrs, loc);
      return broadcast_to(div(g, count, loc), xs, loc);
    }
    case Op::ReduceMax: {
      // Split evenly among ties (as TF does), so the gradient of max(x, x) is 1/2 each. A slice
      // holding a NaN has the maximum NaN (the forward op): its NaNs are the ties (x != x), and
      // where(), not a product, keeps every other element at exactly 0 even when dy is NaN.
      // Qualified: with a std::source_location argument, ADL would pick std::equal.
      Tensor hit = towerjit::equal(c.x[0], keep_reduced_dims(c, c.y), loc);
      hit = where(not_equal(c.x[0], c.x[0], loc), Operand(1.0, loc), hit, loc);
      Tensor ties = sum(hit, axes, true, loc);
      return where(hit, div(g, ties, loc), Operand(0.0, loc), loc);
    }
    case Op::ReduceLogSumExp:  // softmax over the reduced axes: elementwise, given y
      return mul(g, exp(sub(c.x[0], keep_reduced_dims(c, c.y), loc), loc), loc);
    default:
      internal_check(false) << "no reduction gradient rule for " << op_name(c.node.op);
      return g;
  }
}

}  // namespace

bool backward_elementwise(const GradContext& c, std::vector<Tensor>& dx) {
  const Loc loc = c.loc();
  switch (op_kind(c.node.op)) {
    case OpKind::Unary:
      dx[0] = unary_grad(c);
      return true;
    case OpKind::Binary: {
      Tensor ga, gb;
      binary_grad(c, ga, gb);
      if (c.want[0]) dx[0] = unbroadcast(ga, c.in_shape(0), loc);
      if (c.want[1]) dx[1] = unbroadcast(gb, c.in_shape(1), loc);
      return true;
    }
    case OpKind::Reduce:
      dx[0] = reduce_grad(c);
      return true;
    default:
      break;
  }
  if (c.node.op == Op::PhaseSelect) {
    dx[0] = c.dy;
    return true;
  }
  if (c.node.op != Op::Select) return false;
  // The condition gets nothing; a and b get g where they were chosen.
  const Tensor cond = c.x[0], g = c.dy;
  if (c.want[1]) dx[1] = unbroadcast(where(cond, g, Operand(0.0, loc), loc), c.in_shape(1), loc);
  if (c.want[2]) dx[2] = unbroadcast(where(cond, Operand(0.0, loc), g, loc), c.in_shape(2), loc);
  return true;
}

std::vector<Tensor> backward(const GradContext& c) {
  std::vector<Tensor> dx(c.x.size());
  if (backward_elementwise(c, dx) || backward_structural(c, dx)) {
    for (size_t k = 0; k < dx.size(); ++k)
      if (!c.want[k]) dx[k] = Tensor();  // a rule may share work and fill unwanted sides
    return dx;
  }
  internal_check(false) << "no gradient rule for " << op_name(c.node.op);
  return dx;
}

}  // namespace towerjit::detail
