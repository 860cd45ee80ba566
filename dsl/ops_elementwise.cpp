// Leaves and elementwise ops: shape and dtype checks, then one node each.
#include <algorithm>
#include <cmath>

#include "dsl/ops_internal.h"

namespace towerjit {
namespace detail {

void check_batch_once(const Shape& shape, std::string_view op, const std::vector<int>& inputs,
                      const Graph& graph, Loc loc) {
  if (std::count(shape.dims().begin(), shape.dims().end(), kBatch) <= 1) return;
  std::string operands;
  for (int id : inputs) operands += (operands.empty() ? "" : " and ") + graph.node(id).shape.str();
  user_check(false, loc) << op << ": the result " << shape.str() << " of operands " << operands
                         << " holds the batch dimension B twice" << in_scope(graph)
                         << "; a shape holds B at most once: line B up in both operands (transpose or "
                            "reshape one) or give one its size";
}

namespace {

// bf16 and f16 are storage types: they enter through inputs, constants, variables and casts,
// move through the layout ops that only read elements elsewhere, and feed matrix products;
// every op that computes takes f32 (the policy's casts go around it).
bool takes_half_float(Op op) {
  switch (op) {
    case Op::Input: case Op::Variable: case Op::Constant: case Op::Cast: case Op::MatMul:
    case Op::Reshape: case Op::Transpose: case Op::BroadcastTo: case Op::Slice:
      return true;
    default: return false;
  }
}

void check_half_float(Op op, const std::vector<int>& inputs, DType dtype, const Graph& graph, Loc loc) {
  if (takes_half_float(op)) return;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Node& in = graph.node(inputs[i]);
    user_check(!is_half_float(in.dtype), loc)
        << op_name(op) << ": operand " << i << " is " << dtype_name(in.dtype) << in.shape.str()
        << in_scope(graph) << ", but " << op_name(op) << " computes in f32 only; "
        << dtype_name(in.dtype) << " is a storage type (matmul, casts and layout ops take it): "
        << "convert the operand with cast(x, DType::f32) first";
  }
  user_check(!is_half_float(dtype), loc)
      << op_name(op) << ": cannot produce " << dtype_name(dtype) << in_scope(graph)
      << "; compute in f32 and cast the result with cast(x, DType::" << dtype_name(dtype) << ")";
}

}  // namespace

Tensor make(Graph& graph, Op op, std::vector<int> inputs, Shape shape, DType dtype,
            Attrs attrs, Loc loc) {
  // Broadcasting can put B in two places ([1,B] with [B,1] is [B,B]), which no program can run:
  // refused here for every op at once, unless the op checked first under its DSL name.
  check_batch_once(shape, op_name(op), inputs, graph, loc);
  check_half_float(op, inputs, dtype, graph, loc);
  // Gradient rules build nodes too; theirs take the forward node's stack (Graph::add).
  Node n{.op = op, .inputs = std::move(inputs), .shape = std::move(shape), .dtype = dtype,
         .attrs = std::move(attrs), .loc = loc,
         .stack = graph.differentiating() < 0 ? capture_call_stack() : nullptr, .scope = {}};
  return Tensor(&graph, graph.add(std::move(n)));
}

std::string in_scope(const Graph& graph) {
  const std::string path = graph.scope_path();
  return path.empty() ? "" : " in \"" + path + "\"";
}

Graph& graph_of(std::initializer_list<const Operand*> operands, const char* op, Loc loc) {
  Graph* graph = nullptr;
  for (const Operand* o : operands) {
    if (o->is_scalar) continue;
    user_check(o->tensor.valid(), loc) << op << ": an operand is an empty tensor; "
                                       << "build it with an op before using it";
    user_check(!graph || graph == &o->tensor.graph(), loc)
        << op << ": operands belong to different graphs; build the whole model in one graph";
    graph = &o->tensor.graph();
  }
  return graph ? *graph : Graph::current();
}

Tensor as_tensor(const Operand& operand, Graph& graph, DType dtype) {
  if (!operand.is_scalar) return operand.tensor;
  Attrs attrs;
  attrs.value = operand.scalar;
  return make(graph, Op::Constant, {}, Shape{}, dtype, attrs, operand.loc);
}

std::vector<int> normalize_axes(const std::vector<int>& axes, const Tensor& x, const char* op,
                                Loc loc) {
  std::vector<int> out;
  if (axes.empty()) {
    for (int i = 0; i < x.rank(); ++i) out.push_back(i);
    return out;
  }
  std::vector<bool> seen(x.rank(), false);
  for (int axis : axes) {
    const int a = one_axis(axis, x, op, loc);
    user_check(!seen[a], loc) << op << ": axis " << axis << " is listed twice";
    seen[a] = true;
  }
  for (int i = 0; i < x.rank(); ++i)
    if (seen[i]) out.push_back(i);
  return out;
}

int one_axis(int axis, const Tensor& x, const char* op, Loc loc) {
  auto a = normalize_axis(axis, x.rank());
  user_check(a.has_value(), loc) << op << ": axis " << axis << " is out of range for "
                                 << x.describe() << in_scope(x.graph()) << "; valid axes are "
                                 << -x.rank() << " to " << x.rank() - 1;
  return *a;
}

void require_f32(const Tensor& x, const char* op, Loc loc) {
  user_check(x.dtype() == DType::f32, loc)
      << op << ": expects f32 but got " << x.describe() << in_scope(x.graph())
      << "; convert it with cast(x, DType::f32)";
}

}  // namespace detail

using namespace detail;

Tensor input(const std::string& name, Shape shape, DType dtype, Loc loc) {
  Graph& g = Graph::current();
  user_check(!name.empty(), loc) << "input: the name is empty; give each input a name to feed";
  user_check(!g.find_input(name), loc)
      << "input: \"" << name << "\" is already an input of this graph; "
      << "use that tensor again or pick another name";
  for (int64_t d : shape.dims())
    user_check(d == kBatch || d > 0, loc) << "input \"" << name << "\": dimension " << d
                                          << " in " << shape.str() << " must be positive or kBatch";
  user_check(std::count(shape.dims().begin(), shape.dims().end(), kBatch) <= 1, loc)
      << "input \"" << name << "\": " << shape.str() << " has the batch dimension B twice; "
      << "a shape holds B at most once (give the other dimension its size)";
  Attrs attrs;
  attrs.name = name;
  return make(g, Op::Input, {}, std::move(shape), dtype, attrs, loc);
}

Tensor constant(double value, Shape shape, DType dtype, Loc loc) {
  for (int64_t d : shape.dims())
    user_check(d == kBatch || d > 0, loc)
        << "constant: dimension " << d << " in " << shape.str() << " must be positive or kBatch";
  Attrs attrs;
  attrs.value = value;
  return make(Graph::current(), Op::Constant, {}, std::move(shape), dtype, attrs, loc);
}

namespace {

Tensor unary(Op op, Tensor x, Loc loc, bool real_only = true) {
  const char* name = op_name(op).data();
  Operand o(x, loc);
  Graph& g = graph_of({&o}, name, loc);
  if (real_only) require_f32(x, name, loc);
  return make(g, op, {x.id()}, x.shape(), x.dtype(), {}, loc);
}

Tensor binary(Op op, const Operand& a, const Operand& b, Loc loc) {
  const char* name = op_name(op).data();
  Graph& g = graph_of({&a, &b}, name, loc);
  // A plain number takes the dtype of the tensor beside it.
  const DType dtype = !a.is_scalar ? a.tensor.dtype() : !b.is_scalar ? b.tensor.dtype() : DType::f32;
  for (const Operand* o : {&a, &b})
    user_check(!o->is_scalar || dtype != DType::i32 || o->scalar == std::trunc(o->scalar), loc)
        << name << ": the number " << o->scalar << " is not an integer but the other operand is i32"
        << in_scope(g) << "; convert the tensor with cast(x, DType::f32) first";
  Tensor ta = as_tensor(a, g, dtype), tb = as_tensor(b, g, dtype);
  user_check(ta.dtype() == tb.dtype(), loc)
      << name << ": dtype mismatch between " << ta.describe() << " and " << tb.describe()
      << in_scope(g) << "; convert one with cast()";
  auto shape = broadcast_shapes(ta.shape(), tb.shape());
  user_check(shape.has_value(), loc)
      << "cannot " << name << " tensors of shape " << ta.shape().str() << " and "
      << tb.shape().str() << in_scope(g)
      << ". Shapes must match or broadcast (numpy rules: each trailing dimension equal or 1)";
  if (op == Op::Pow) require_f32(ta, name, loc);
  return make(g, op, {ta.id(), tb.id()}, *shape, dtype, {}, loc);
}

}  // namespace

Tensor neg(Tensor x, Loc loc) { return unary(Op::Neg, x, loc, false); }
Tensor exp(Tensor x, Loc loc) { return unary(Op::Exp, x, loc); }
Tensor log(Tensor x, Loc loc) { return unary(Op::Log, x, loc); }
Tensor sqrt(Tensor x, Loc loc) { return unary(Op::Sqrt, x, loc); }
Tensor rsqrt(Tensor x, Loc loc) { return unary(Op::Rsqrt, x, loc); }
Tensor abs(Tensor x, Loc loc) { return unary(Op::Abs, x, loc, false); }
Tensor sign(Tensor x, Loc loc) { return unary(Op::Sign, x, loc, false); }
Tensor relu(Tensor x, Loc loc) { return unary(Op::Relu, x, loc); }
Tensor sigmoid(Tensor x, Loc loc) { return unary(Op::Sigmoid, x, loc); }
Tensor tanh(Tensor x, Loc loc) { return unary(Op::Tanh, x, loc); }
Tensor erf(Tensor x, Loc loc) { return unary(Op::Erf, x, loc); }
Tensor gelu(Tensor x, Loc loc) { return unary(Op::Gelu, x, loc); }
Tensor softplus(Tensor x, Loc loc) { return unary(Op::Softplus, x, loc); }
Tensor stop_gradient(Tensor x, Loc loc) { return unary(Op::StopGradient, x, loc, false); }

Tensor cast(Tensor x, DType dtype, Loc loc) {
  Operand o(x, loc);
  Graph& g = graph_of({&o}, "cast", loc);
  if (x.dtype() == dtype) return x;
  return make(g, Op::Cast, {x.id()}, x.shape(), dtype, {}, loc);
}

Tensor add(Operand a, Operand b, Loc loc) { return binary(Op::Add, a, b, loc); }
Tensor sub(Operand a, Operand b, Loc loc) { return binary(Op::Sub, a, b, loc); }
Tensor mul(Operand a, Operand b, Loc loc) { return binary(Op::Mul, a, b, loc); }
Tensor div(Operand a, Operand b, Loc loc) { return binary(Op::Div, a, b, loc); }
Tensor maximum(Operand a, Operand b, Loc loc) { return binary(Op::Max, a, b, loc); }
Tensor minimum(Operand a, Operand b, Loc loc) { return binary(Op::Min, a, b, loc); }
Tensor pow(Operand a, Operand b, Loc loc) { return binary(Op::Pow, a, b, loc); }
Tensor less(Operand a, Operand b, Loc loc) { return binary(Op::Less, a, b, loc); }
Tensor less_equal(Operand a, Operand b, Loc loc) { return binary(Op::LessEqual, a, b, loc); }
Tensor greater(Operand a, Operand b, Loc loc) { return binary(Op::Greater, a, b, loc); }
Tensor greater_equal(Operand a, Operand b, Loc loc) { return binary(Op::GreaterEqual, a, b, loc); }
Tensor equal(Operand a, Operand b, Loc loc) { return binary(Op::Equal, a, b, loc); }
Tensor not_equal(Operand a, Operand b, Loc loc) { return binary(Op::NotEqual, a, b, loc); }

Tensor where(Tensor cond, Operand a, Operand b, Loc loc) {
  Operand c(cond, loc);
  Graph& g = graph_of({&c, &a, &b}, "where", loc);
  const DType dtype = !a.is_scalar ? a.tensor.dtype() : !b.is_scalar ? b.tensor.dtype() : DType::f32;
  Tensor ta = as_tensor(a, g, dtype), tb = as_tensor(b, g, dtype);
  user_check(ta.dtype() == tb.dtype(), loc)
      << "where: dtype mismatch between " << ta.describe() << " and " << tb.describe()
      << in_scope(g) << "; convert one with cast()";
  auto ab = broadcast_shapes(ta.shape(), tb.shape());
  auto shape = ab ? broadcast_shapes(cond.shape(), *ab) : std::nullopt;
  user_check(shape.has_value(), loc)
      << "where: cannot broadcast condition " << cond.shape().str() << " with "
      << ta.shape().str() << " and " << tb.shape().str() << in_scope(g)
      << ". Shapes must match or broadcast (numpy rules)";
  check_batch_once(*shape, "where", {cond.id(), ta.id(), tb.id()}, g, loc);
  return make(g, Op::Select, {cond.id(), ta.id(), tb.id()}, *shape, dtype, {}, loc);
}

}  // namespace towerjit
