#include "jit/passes/simplify.h"

#include <cmath>
#include <optional>

namespace towerjit {
namespace {

std::optional<double> constant_value(const Graph& g, int id) {
  const Node& n = g.node(id);
  if (n.op != Op::Constant || n.dtype != DType::f32) return std::nullopt;
  return n.attrs.value;
}

bool is_constant(const Graph& g, int id, double v) {
  auto c = constant_value(g, id);
  return c && *c == v;
}

// The value of an f32 op on constant operands, when it is one we fold.
std::optional<double> fold(Op op, double a, double b) {
  switch (op) {
    case Op::Neg: return -a;
    case Op::Add: return a + b;
    case Op::Sub: return a - b;
    case Op::Mul: return a * b;
    case Op::Div: return b != 0 ? std::optional<double>(a / b) : std::nullopt;
    case Op::Exp: return std::exp(a);
    case Op::Sqrt: return a >= 0 ? std::optional<double>(std::sqrt(a)) : std::nullopt;
    default: return std::nullopt;
  }
}

// The id that already computes `n`'s value, or -1.
int identity_of(const Node& n, const Graph& out) {
  auto in = [&](int i) { return n.inputs[i]; };
  auto same = [&](int id) { return out.node(id).shape == n.shape && out.node(id).dtype == n.dtype; };
  switch (n.op) {
    case Op::Mul:
      if (is_constant(out, in(1), 1) && same(in(0))) return in(0);
      if (is_constant(out, in(0), 1) && same(in(1))) return in(1);
      return -1;
    case Op::Add:
      if (is_constant(out, in(1), 0) && same(in(0))) return in(0);
      if (is_constant(out, in(0), 0) && same(in(1))) return in(1);
      return -1;
    case Op::Sub:
      return is_constant(out, in(1), 0) && same(in(0)) ? in(0) : -1;
    case Op::Div:
      return is_constant(out, in(1), 1) && same(in(0)) ? in(0) : -1;
    case Op::Neg:
      return out.node(in(0)).op == Op::Neg ? out.node(in(0)).inputs[0] : -1;
    case Op::Cast: {
      if (same(in(0))) return in(0);
      // A 16-bit value widened to f32 and rounded back is itself (the widening is exact): the
      // precision policy's casts between two 16-bit ops (jit/passes/half_convolutions.h).
      const Node& wide = out.node(in(0));
      if (wide.op == Op::Cast && wide.dtype == DType::f32 && is_half_float(n.dtype) &&
          out.node(wide.inputs[0]).dtype == n.dtype && out.node(wide.inputs[0]).shape == n.shape)
        return wide.inputs[0];
      return -1;
    }
    case Op::Reshape: case Op::BroadcastTo:
      return same(in(0)) ? in(0) : -1;
    case Op::Transpose: {
      for (int i = 0; i < static_cast<int>(n.attrs.axes.size()); ++i)
        if (n.attrs.axes[i] != i) return -1;
      return in(0);
    }
    default:
      return -1;
  }
}

}  // namespace

Rewritten simplify(const Graph& graph) {
  return rewrite_graph(graph, [&](Node n, Graph& out) {
    // A constant moved by a layout op is the same constant in the new shape (the seed of a
    // gradient, 1, reaches the loss's producers through reshape and broadcast_to).
    if ((n.op == Op::Reshape || n.op == Op::BroadcastTo) && out.node(n.inputs[0]).op == Op::Constant) {
      Node c = out.node(n.inputs[0]);
      c.shape = n.shape;
      c.loc = n.loc;
      c.stack = n.stack;
      return out.add(std::move(c));
    }
    if (const int id = identity_of(n, out); id >= 0) return id;
    // A program runs on one device, where a collective over the towers is its input (the tower
    // runtime cuts the graph at collectives before compiling: jit/passes/cut_collectives.h).
    if (n.op == Op::AllReduce) return n.inputs[0];
    // A graph not selected for inference (jit/passes/select_phase.h) trains.
    if (n.op == Op::PhaseSelect) return n.inputs[0];
    // A 16-bit value widened, reshaped and rounded back is the value reshaped (the precision
    // policy's casts around a flatten between a 16-bit op and a 16-bit product).
    if (n.op == Op::Cast && is_half_float(n.dtype) && out.node(n.inputs[0]).op == Op::Reshape) {
      const Node& reshape = out.node(n.inputs[0]);
      const Node& wide = out.node(reshape.inputs[0]);
      if (wide.op == Op::Cast && wide.dtype == DType::f32 && out.node(wide.inputs[0]).dtype == n.dtype) {
        Node narrow = reshape;
        narrow.inputs = {wide.inputs[0]};
        narrow.dtype = n.dtype;
        return out.add(std::move(narrow));
      }
    }
    // reshape(reshape(x)) is one reshape; transpose(transpose(x)) one transpose.
    if (n.op == Op::Reshape && out.node(n.inputs[0]).op == Op::Reshape)
      n.inputs[0] = out.node(n.inputs[0]).inputs[0];
    if (n.op == Op::Transpose && out.node(n.inputs[0]).op == Op::Transpose) {
      const Node& inner = out.node(n.inputs[0]);
      std::vector<int> composed;
      for (int a : n.attrs.axes) composed.push_back(inner.attrs.axes[a]);
      n.attrs.axes = composed;
      n.inputs[0] = inner.inputs[0];
      if (const int id = identity_of(n, out); id >= 0) return id;
    }
    // Arithmetic on constants becomes a constant.
    const OpKind kind = op_kind(n.op);
    if ((kind == OpKind::Unary || kind == OpKind::Binary) && n.dtype == DType::f32) {
      auto a = constant_value(out, n.inputs[0]);
      auto b = kind == OpKind::Binary ? constant_value(out, n.inputs[1]) : std::optional<double>(0);
      if (a && b)
        if (auto v = fold(n.op, *a, *b)) {
          Node c{.op = Op::Constant, .inputs = {}, .shape = n.shape, .dtype = DType::f32,
                 .attrs = {}, .loc = n.loc, .stack = n.stack, .scope = n.scope};
          c.attrs.value = *v;
          return out.add(std::move(c));
        }
    }
    return out.add(std::move(n));
  });
}

}  // namespace towerjit
