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

// For a reshape that only inserts or removes dimensions of size 1, the input dimension each
// output dimension carries (-1 for an inserted 1); empty when the reshape moves elements.
std::vector<int> unit_reshape(const Shape& in, const Shape& out) {
  std::vector<int> from(out.rank(), -1);
  int j = 0;
  for (int i = 0; i < out.rank(); ++i) {
    if (out[i] == 1) continue;
    while (j < in.rank() && in[j] == 1) ++j;
    if (j == in.rank() || in[j] != out[i]) return {};
    from[i] = j++;
  }
  while (j < in.rank() && in[j] == 1) ++j;
  if (j != in.rank()) return {};
  if (out.rank() == 0 && in.rank() == 0) return {};
  return from.empty() ? std::vector<int>{-2} : from;  // {-2}: to a scalar
}

bool inline_reshape(const Graph& g, const Node& n) {
  return n.op == Op::Reshape && !unit_reshape(g.node(n.inputs[0]).shape, n.shape).empty();
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
  void choose_hosts();
  int kernel_root(int node) const;
  int add_access(kir::Kernel& k, int buffer, const Shape& shape, const IndexMap& map);
  IndexMap broadcast_input(const IndexMap& map, const Shape& out, const Shape& in);

  const Graph& g_;
  FusionLimits limits_;
  kir::Program p_;
  std::vector<bool> needed_, mat_, folded_;
  std::vector<int> uses_, buffer_;
  std::vector<int> host_;  // a node computed inside its first consumer's kernel, or -1
  int root_ = -1;          // the node whose kernel is being built
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
    // A count reads only its input's shape, so the input need not be computed.
    if (g_.node(n).op == Op::Count) continue;
    for (int in : g_.node(n).inputs) stack.push_back(in);
  }
  for (int n = 0; n < g_.size(); ++n)
    if (needed_[n] && g_.node(n).op != Op::Count)
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
    const bool moves = node.op == Op::Reshape && !inline_reshape(g_, node);
    if (node.op == Op::Input || node.op == Op::Variable || kind == OpKind::Reduce || moves ||
        is_library(node.op))
      mat_[n] = true;
    if ((kind == OpKind::Unary || kind == OpKind::Binary || kind == OpKind::Layout ||
         node.op == Op::Select) && uses_[n] > 1)
      mat_[n] = true;
    if (node.op == Op::Assign) mat_[node.inputs[1]] = true;
    if (moves || (is_library(node.op) && node.op != Op::MatMul))
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
  choose_hosts();
}

// Multi-output fusion: an elementwise node with a buffer of its own (it has several consumers)
// is computed inside the kernel of its first consumer, which stores it on the side, when that
// consumer loops over the same space and reads it directly: dense+bias is stored by the ReLU
// kernel, the ReLU-gradient mask by the bias-gradient sum, and so on. Later consumers read the
// buffer as before; steps run in node order, so they come after.
void Lowering::choose_hosts() {
  host_.assign(g_.size(), -1);
  std::vector<std::vector<int>> consumers(g_.size());
  for (int n = 0; n < g_.size(); ++n)
    if (needed_[n] && g_.node(n).op != Op::Count)
      for (int in : g_.node(n).inputs) consumers[in].push_back(n);
  auto elementwise = [&](const Node& x) {
    const OpKind k = op_kind(x.op);
    return k == OpKind::Unary || k == OpKind::Binary || x.op == Op::Select ||
           x.op == Op::BroadcastTo || x.op == Op::Transpose || x.op == Op::Slice ||
           x.op == Op::Constant || x.op == Op::RandomUniform || inline_reshape(g_, x);
  };
  // From the last node back, so a consumer's own host is known: the kernel that computes the
  // node runs at its root's position, and every other consumer must run after that.
  for (int n = g_.size() - 1; n >= 0; --n) {
    const Node& p = g_.node(n);
    if (!needed_[n] || !mat_[n] || folded_[n] || consumers[n].empty() || !elementwise(p)) continue;
    const int c = consumers[n].front();
    if (!mat_[c]) continue;
    const Node& consumer = g_.node(c);
    const bool same_space = op_kind(consumer.op) == OpKind::Reduce
                                ? consumer.inputs[0] == n
                                : elementwise(consumer) && consumer.shape == p.shape &&
                                      consumer.op != Op::Transpose && consumer.op != Op::Slice &&
                                      consumer.op != Op::Reshape && consumer.op != Op::BroadcastTo;
    const int root = kernel_root(c);
    const bool later = std::all_of(consumers[n].begin(), consumers[n].end(),
                                   [&](int other) { return other == c || other > root; });
    if (same_space && later) host_[n] = c;
  }
}

int Lowering::kernel_root(int node) const {
  while (host_[node] >= 0) node = host_[node];
  return node;
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
  if (n.op == Op::Reshape && !inline_reshape(g_, n)) b.alias_of = buffer_of(n.inputs[0]);
  b.nodes.push_back(node);
  p_.buffers.push_back(b);
  return buffer_[node] = static_cast<int>(p_.buffers.size()) - 1;
}

void Lowering::emit_step(int node) {
  const Node& n = g_.node(node);
  const bool view = n.op == Op::Reshape && !inline_reshape(g_, n);
  if (n.op == Op::Input || n.op == Op::Variable || view || n.op == Op::Assign) {
    buffer_of(node);
    return;
  }
  if (host_[node] >= 0) return;  // computed inside its first consumer's kernel
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
  root_ = node;
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
    k.outputs.insert(k.outputs.begin(), {add_access(k, out, n.shape, out_map), value});
  } else {
    k.space = n.shape;
    const IndexMap id = identity_map(n.shape.rank());
    const int value = expr(k, node, id, true);
    k.outputs.insert(k.outputs.begin(), {add_access(k, out, n.shape, id), value});
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
  if (!root && mat_[node] && kernel_root(node) == root_) {
    // Computed here for a later consumer too: inline it and store it on the side.
    const int value = expr(k, node, map, true);
    const int access = add_access(k, buffer_of(node), n.shape, map);
    const bool stored = std::any_of(k.outputs.begin(), k.outputs.end(),
                                    [&](const kir::Kernel::Output& o) { return o.access == access; });
    if (!stored) k.outputs.push_back({access, value});
    return value;
  }
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
    case Op::Reshape: {  // only size-1 dimensions come or go (see unit_reshape)
      const Shape& in_shape = g_.node(n.inputs[0]).shape;
      const std::vector<int> from = unit_reshape(in_shape, n.shape);
      IndexMap in{std::vector<int>(in_shape.rank(), -1), std::vector<int64_t>(in_shape.rank(), 0)};
      for (int i = 0; i < n.shape.rank(); ++i)
        if (from[0] != -2 && from[i] >= 0) in.axis[from[i]] = map.axis[i], in.offset[from[i]] = map.offset[i];
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
