#include "jit/passes/lower.h"

#include <algorithm>

#include "dsl/error.h"

namespace towerjit {
namespace {

using kir::Affine;

// Which loop axis (or none: coordinate 0) plus a constant gives each coordinate of a node.
struct IndexMap {
  std::vector<int> axis;
  std::vector<int64_t> offset;
};

IndexMap identity_map(int rank) {
  IndexMap m;
  for (int i = 0; i < rank; ++i) m.axis.push_back(i), m.offset.push_back(0);
  return m;
}

// Row-major strides of a shape as c + b*B.
std::vector<Affine> affine_strides(const Shape& shape) {
  std::vector<Affine> strides(shape.rank());
  Affine s{1, 0};
  for (int i = shape.rank() - 1; i >= 0; --i) {
    strides[i] = s;
    if (shape[i] == kBatch) {
      internal_check(s.b == 0) << "a shape with two batch dimensions: " << shape.str();
      s = {0, s.c};
    } else {
      s = {s.c * shape[i], s.b * shape[i]};
    }
  }
  return strides;
}

bool is_library(Op op) {
  switch (op) {
    case Op::MatMul: case Op::OneHot: case Op::ArgMax: case Op::Conv2D:
    case Op::Conv2DGradInput: case Op::Conv2DGradFilter: case Op::MaxPool2D:
    case Op::MaxPool2DGrad: case Op::AvgPool2D: case Op::AvgPool2DGrad: case Op::Pad:
    case Op::Concat:
      return true;
    default:
      return false;
  }
}

// A transpose of the last two axes that a matrix product can read as a transposed operand.
bool swaps_last_two(const Node& n) {
  if (n.op != Op::Transpose || n.shape.rank() < 2) return false;
  const int r = n.shape.rank();
  for (int i = 0; i < r - 2; ++i)
    if (n.attrs.axes[i] != i) return false;
  return n.attrs.axes[r - 2] == r - 1 && n.attrs.axes[r - 1] == r - 2;
}

class Lowering {
 public:
  Lowering(const Graph& g, FusionLimits limits) : g_(g), limits_(limits) {}
  kir::Program run(const std::vector<int>& fetches, const std::vector<int>& update_ops);

 private:
  void mark_needed(const std::vector<int>& roots);
  void decide_buffers(const std::vector<int>& fetches);
  int buffer_of(int node);
  void emit_step(int node);
  void emit_library(int node);
  void emit_kernel(int node);
  int expr(kir::Kernel& k, int node, const IndexMap& map, bool root);
  int add_expr(kir::Kernel& k, kir::Expr e);
  int add_access(kir::Kernel& k, int buffer, const Shape& shape, const IndexMap& map);
  IndexMap broadcast_input(const IndexMap& map, const Shape& out, const Shape& in);

  const Graph& g_;
  FusionLimits limits_;
  kir::Program p_;
  std::vector<bool> needed_, mat_, folded_;
  std::vector<int> uses_, buffer_;
};

kir::Program Lowering::run(const std::vector<int>& fetches, const std::vector<int>& update_ops) {
  std::vector<int> roots = fetches;
  roots.insert(roots.end(), update_ops.begin(), update_ops.end());
  mark_needed(roots);
  decide_buffers(fetches);
  buffer_.assign(g_.size(), -1);
  for (int n = 0; n < g_.size(); ++n)
    if (needed_[n] && mat_[n]) emit_step(n);
  for (int u : update_ops) {
    const Node& a = g_.node(u);
    internal_check(a.op == Op::Assign) << "update op %" << u << " is " << op_name(a.op);
    p_.copies.push_back({buffer_of(a.inputs[1]), buffer_of(a.inputs[0])});
    p_.steps.push_back({kir::Step::Kind::copy, static_cast<int>(p_.copies.size()) - 1});
  }
  for (int f : fetches) p_.fetches.push_back(buffer_of(f));
  return std::move(p_);
}

void Lowering::mark_needed(const std::vector<int>& roots) {
  needed_.assign(g_.size(), false);
  uses_.assign(g_.size(), 0);
  std::vector<int> stack = roots;
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (needed_[n]) continue;
    needed_[n] = true;
    for (int in : g_.node(n).inputs) stack.push_back(in);
  }
  for (int n = 0; n < g_.size(); ++n)
    if (needed_[n])
      for (int in : g_.node(n).inputs) uses_[in]++;
}

// Consumers decide for their producers, so walk from the last node back; then a forward walk
// gives a buffer to any producer whose inlined body would outgrow the fusion limit.
void Lowering::decide_buffers(const std::vector<int>& fetches) {
  mat_.assign(g_.size(), false);
  folded_.assign(g_.size(), false);
  for (int f : fetches) mat_[f] = true;
  for (int n = g_.size() - 1; n >= 0; --n) {
    if (!needed_[n]) continue;
    const Node& node = g_.node(n);
    const OpKind kind = op_kind(node.op);
    if (node.op == Op::Input || node.op == Op::Variable || kind == OpKind::Reduce ||
        node.op == Op::Reshape || is_library(node.op))
      mat_[n] = true;
    if ((kind == OpKind::Unary || kind == OpKind::Binary || kind == OpKind::Layout ||
         node.op == Op::Select) && uses_[n] > 1)
      mat_[n] = true;
    if (node.op == Op::Assign) mat_[node.inputs[1]] = true;
    if (node.op == Op::Reshape || (is_library(node.op) && node.op != Op::MatMul))
      for (int in : node.inputs) mat_[in] = true;
    if (node.op == Op::MatMul) {
      for (int in : node.inputs) {
        const Node& t = g_.node(in);
        if (swaps_last_two(t) && uses_[in] == 1 && !mat_[in]) {
          folded_[in] = true;
          mat_[t.inputs[0]] = true;
        } else {
          mat_[in] = true;
        }
      }
    }
  }
  std::vector<int> size(g_.size(), 1);
  for (int n = 0; n < g_.size(); ++n) {
    if (!needed_[n]) continue;
    for (int in : g_.node(n).inputs)
      if (!mat_[in]) size[n] += size[in];
    if (size[n] > limits_.max_exprs && !mat_[n] && !folded_[n] && g_.node(n).op != Op::Assign)
      mat_[n] = true, size[n] = 1;
  }
}

int Lowering::buffer_of(int node) {
  if (buffer_[node] >= 0) return buffer_[node];
  const Node& n = g_.node(node);
  if (n.op == Op::Assign) return buffer_[node] = buffer_of(n.inputs[1]);
  kir::Buffer b;
  b.shape = n.shape;
  b.dtype = n.dtype;
  b.kind = n.op == Op::Input ? kir::Buffer::Kind::input
           : n.op == Op::Variable ? kir::Buffer::Kind::variable
                                  : kir::Buffer::Kind::temp;
  b.name = (n.op == Op::Input || n.op == Op::Variable)
               ? n.attrs.name
               : "t" + std::to_string(p_.buffers.size());
  if (n.op == Op::Reshape) b.alias_of = buffer_of(n.inputs[0]);
  b.nodes.push_back(node);
  p_.buffers.push_back(b);
  return buffer_[node] = static_cast<int>(p_.buffers.size()) - 1;
}

void Lowering::emit_step(int node) {
  const Node& n = g_.node(node);
  if (n.op == Op::Input || n.op == Op::Variable || n.op == Op::Reshape || n.op == Op::Assign) {
    buffer_of(node);
    return;
  }
  if (is_library(n.op)) emit_library(node);
  else emit_kernel(node);
}

void Lowering::emit_library(int node) {
  const Node& n = g_.node(node);
  kir::LibraryCall call{.op = n.op, .inputs = {}, .output = -1, .attrs = n.attrs, .node = node};
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    int in = n.inputs[i];
    if (folded_[in]) {
      (i == 0 ? call.transpose_a : call.transpose_b) = true;
      in = g_.node(in).inputs[0];
    }
    call.inputs.push_back(buffer_of(in));
  }
  call.output = buffer_of(node);
  p_.calls.push_back(std::move(call));
  p_.steps.push_back({kir::Step::Kind::library, static_cast<int>(p_.calls.size()) - 1});
}

void Lowering::emit_kernel(int node) {
  const Node& n = g_.node(node);
  kir::Kernel k;
  const int out = buffer_of(node);
  if (op_kind(n.op) == OpKind::Reduce) {
    const Node& x = g_.node(n.inputs[0]);
    k.space = x.shape;
    k.reduce = n.op;
    k.reduce_axes = n.attrs.axes;
    const int value = expr(k, n.inputs[0], identity_map(x.shape.rank()), false);
    IndexMap out_map;  // the output's coordinates in the input's loop space
    for (int i = 0; i < x.shape.rank(); ++i) {
      const bool reduced =
          std::find(k.reduce_axes.begin(), k.reduce_axes.end(), i) != k.reduce_axes.end();
      if (reduced && !n.attrs.keepdims) continue;
      out_map.axis.push_back(reduced ? -1 : i);
      out_map.offset.push_back(0);
    }
    k.outputs.push_back({add_access(k, out, n.shape, out_map), value});
  } else {
    k.space = n.shape;
    const IndexMap id = identity_map(n.shape.rank());
    const int value = expr(k, node, id, true);
    k.outputs.push_back({add_access(k, out, n.shape, id), value});
  }
  std::string name = "k" + std::to_string(p_.kernels.size());
  std::sort(k.nodes.begin(), k.nodes.end());
  k.nodes.insert(k.nodes.begin(), node);  // the root first: it names the kernel
  k.nodes.erase(std::unique(k.nodes.begin() + 1, k.nodes.end()), k.nodes.end());
  for (size_t i = 0; i < k.nodes.size() && i < 4; ++i)
    name += "_" + std::string(op_name(g_.node(k.nodes[i]).op));
  k.name = name;
  p_.kernels.push_back(std::move(k));
  p_.steps.push_back({kir::Step::Kind::kernel, static_cast<int>(p_.kernels.size()) - 1});
}

IndexMap Lowering::broadcast_input(const IndexMap& map, const Shape& out, const Shape& in) {
  IndexMap m;
  const int lead = out.rank() - in.rank();
  for (int j = 0; j < in.rank(); ++j) {
    const bool stretched = in[j] == 1 && out[j + lead] != 1;
    m.axis.push_back(stretched ? -1 : map.axis[j + lead]);
    m.offset.push_back(stretched ? 0 : map.offset[j + lead]);
  }
  return m;
}

int Lowering::add_access(kir::Kernel& k, int buffer, const Shape& shape, const IndexMap& map) {
  kir::Access a;
  a.buffer = buffer;
  a.strides.assign(k.space.rank(), Affine{});
  const auto strides = affine_strides(shape);
  for (int j = 0; j < shape.rank(); ++j) {
    if (map.axis[j] >= 0) {
      Affine& s = a.strides[map.axis[j]];
      s = {s.c + strides[j].c, s.b + strides[j].b};
    }
    a.offset = {a.offset.c + map.offset[j] * strides[j].c,
                a.offset.b + map.offset[j] * strides[j].b};
  }
  for (size_t i = 0; i < k.accesses.size(); ++i)
    if (k.accesses[i] == a) return static_cast<int>(i);
  k.accesses.push_back(a);
  return static_cast<int>(k.accesses.size()) - 1;
}

int Lowering::add_expr(kir::Kernel& k, kir::Expr e) {
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const kir::Expr& o = k.exprs[i];
    if (o.kind == e.kind && o.op == e.op && o.dtype == e.dtype && o.args == e.args &&
        o.access == e.access && o.value == e.value && o.axis == e.axis && o.count == e.count &&
        o.seed == e.seed)
      return static_cast<int>(i);
  }
  k.exprs.push_back(std::move(e));
  return static_cast<int>(k.exprs.size()) - 1;
}

int Lowering::expr(kir::Kernel& k, int node, const IndexMap& map, bool root) {
  const Node& n = g_.node(node);
  using K = kir::Expr::Kind;
  if (!root && mat_[node]) {
    return add_expr(k, {.kind = K::load, .op = n.op, .dtype = n.dtype,
                        .access = add_access(k, buffer_of(node), n.shape, map)});
  }
  k.nodes.push_back(node);
  switch (op_kind(n.op)) {
    case OpKind::Unary: {
      const int a = expr(k, n.inputs[0], map, false);
      if (n.op == Op::StopGradient) return a;
      return add_expr(k, {.kind = K::unary, .op = n.op, .dtype = n.dtype, .args = {a}});
    }
    case OpKind::Binary: {
      const int a = expr(k, n.inputs[0],
                         broadcast_input(map, n.shape, g_.node(n.inputs[0]).shape), false);
      const int b = expr(k, n.inputs[1],
                         broadcast_input(map, n.shape, g_.node(n.inputs[1]).shape), false);
      return add_expr(k, {.kind = K::binary, .op = n.op, .dtype = n.dtype, .args = {a, b}});
    }
    default:
      break;
  }
  switch (n.op) {
    case Op::Constant:
      return add_expr(k, {.kind = K::constant, .op = n.op, .dtype = n.dtype, .value = n.attrs.value});
    case Op::Count: {
      Affine count{1, 0};
      const Shape& s = g_.node(n.inputs[0]).shape;
      for (int a : n.attrs.axes)
        count = s[a] == kBatch ? Affine{0, count.c} : Affine{count.c * s[a], count.b * s[a]};
      return add_expr(k, {.kind = K::count, .op = n.op, .dtype = DType::f32, .count = count});
    }
    case Op::Select: {
      std::vector<int> args;
      for (int in : n.inputs)
        args.push_back(expr(k, in, broadcast_input(map, n.shape, g_.node(in).shape), false));
      return add_expr(k, {.kind = K::select, .op = n.op, .dtype = n.dtype, .args = args});
    }
    case Op::BroadcastTo:
      return expr(k, n.inputs[0], broadcast_input(map, n.shape, g_.node(n.inputs[0]).shape),
                  false);
    case Op::Transpose: {
      IndexMap in{std::vector<int>(n.shape.rank()), std::vector<int64_t>(n.shape.rank())};
      for (int i = 0; i < n.shape.rank(); ++i) {
        in.axis[n.attrs.axes[i]] = map.axis[i];
        in.offset[n.attrs.axes[i]] = map.offset[i];
      }
      return expr(k, n.inputs[0], in, false);
    }
    case Op::Slice: {
      IndexMap in = map;
      for (int j = 0; j < n.shape.rank(); ++j) in.offset[j] += n.attrs.begin[j];
      return expr(k, n.inputs[0], in, false);
    }
    case Op::RandomUniform:
      return add_expr(k, {.kind = K::random, .op = n.op, .dtype = DType::f32,
                          .access = add_access(k, -1, n.shape, map), .seed = n.attrs.seed});
    default:
      internal_check(false) << "no loop lowering for " << op_name(n.op) << " (%" << node << ")";
      return -1;
  }
}

}  // namespace

kir::Program lower_to_kernels(const Graph& graph, const std::vector<int>& fetches,
                              const std::vector<int>& update_ops, FusionLimits limits) {
  return Lowering(graph, limits).run(fetches, update_ops);
}

}  // namespace towerjit
