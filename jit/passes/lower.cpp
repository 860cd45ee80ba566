#include "jit/passes/lower.h"

#include "jit/passes/fusion_plan.h"

#include <algorithm>
#include <set>

#include "dsl/error.h"
#include "jit/kir/traffic.h"
#include "jit/knobs.h"

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

class Lowering {
 public:
  Lowering(const Graph& g, FusionLimits limits) : g_(g), limits_(limits) {}
  kir::Program run(const std::vector<int>& fetches, const std::vector<int>& update_ops);

 private:
  int buffer_of(int node);
  void emit_step(int node);
  void emit_library(int node);
  void emit_kernel(int node);
  kir::Kernel build_kernel(int node);
  void finish_kernel(kir::Kernel k);
  int expr(kir::Kernel& k, int node, const IndexMap& map, bool root);
  int add_expr(kir::Kernel& k, kir::Expr e);
  int add_access(kir::Kernel& k, int buffer, const Shape& shape, const IndexMap& map);
  IndexMap broadcast_input(const IndexMap& map, const Shape& out, const Shape& in);

  const Graph& g_;
  FusionLimits limits_;
  kir::Program p_;
  FusionPlan plan_;
  std::vector<int> buffer_;
  int root_ = -1;  // the node whose kernel is being built
  std::set<int> recompute_here_;  // buffered values this kernel computes again instead of loading
  void check_in_place_writes() const;
  int fetch_buffer(int node, const std::vector<int>& update_ops);
};

kir::Program Lowering::run(const std::vector<int>& fetches, const std::vector<int>& update_ops) {
  for (int u : update_ops)
    internal_check(g_.node(u).op == Op::Assign) << "update op %" << u << " is " << op_name(g_.node(u).op);
  plan_ = plan_fusion(g_, fetches, update_ops, limits_);
  buffer_.assign(g_.size(), -1);
  for (int n = 0; n < g_.size(); ++n)
    if (plan_.needed[n] && plan_.buffered[n]) emit_step(n);
  for (int u : update_ops) {
    const Node& a = g_.node(u);
    if (plan_.in_place[a.inputs[1]] >= 0) continue;  // the value's kernel wrote the variable
    p_.copies.push_back({buffer_of(a.inputs[1]), buffer_of(a.inputs[0])});
    p_.steps.push_back({kir::Step::Kind::copy, static_cast<int>(p_.copies.size()) - 1});
  }
  for (int f : fetches) p_.fetches.push_back(fetch_buffer(f, update_ops));
  check_in_place_writes();
  return std::move(p_);
}

int Lowering::buffer_of(int node) {
  if (buffer_[node] >= 0) return buffer_[node];
  const Node& n = g_.node(node);
  if (n.op == Op::Assign) return buffer_[node] = buffer_of(n.inputs[1]);
  if (plan_.in_place[node] >= 0) return buffer_[node] = buffer_of(plan_.in_place[node]);
  kir::Buffer b;
  b.shape = n.shape;
  b.dtype = n.dtype;
  b.kind = n.op == Op::Input ? kir::Buffer::Kind::input
           : n.op == Op::Variable ? kir::Buffer::Kind::variable
                                  : kir::Buffer::Kind::temp;
  b.name = (n.op == Op::Input || n.op == Op::Variable)
               ? n.attrs.name
               : "t" + std::to_string(p_.buffers.size());
  if (plan_.view[node]) b.alias_of = buffer_of(n.inputs[0]);
  b.nodes.push_back(node);
  p_.buffers.push_back(b);
  return buffer_[node] = static_cast<int>(p_.buffers.size()) - 1;
}

// A fetched variable that an update op writes is fetched as it was before the step (as the
// reference interpreter does): a copy taken before anything else runs.
int Lowering::fetch_buffer(int node, const std::vector<int>& update_ops) {
  const int b = buffer_of(node);
  if (g_.node(node).op != Op::Variable) return b;
  const bool updated = std::any_of(update_ops.begin(), update_ops.end(),
                                   [&](int u) { return g_.node(u).inputs[0] == node; });
  if (!updated) return b;
  kir::Buffer before = p_.buffers[b];
  before.kind = kir::Buffer::Kind::temp;
  before.name = "t" + std::to_string(p_.buffers.size());
  p_.buffers.push_back(before);
  const int copy = static_cast<int>(p_.buffers.size()) - 1;
  p_.copies.push_back({b, copy});
  p_.steps.insert(p_.steps.begin(), {kir::Step::Kind::copy, static_cast<int>(p_.copies.size()) - 1});
  return copy;
}

// A kernel that writes a variable in place must read it only at the element it writes; the
// plan makes it so, and this says loudly if it ever does not.
void Lowering::check_in_place_writes() const {
  for (const kir::Kernel& k : p_.kernels)
    for (const auto& o : k.outputs) {
      const kir::Access& store = k.accesses[o.access];
      if (p_.buffers[store.buffer].kind != kir::Buffer::Kind::variable) continue;
      for (const kir::Expr& e : k.exprs) {
        if (e.kind != kir::Expr::Kind::load || k.accesses[e.access].buffer != store.buffer) continue;
        internal_check(k.accesses[e.access] == store)
            << "kernel " << k.name << " reads variable " << p_.buffers[store.buffer].name
            << " away from where it writes it in place";
      }
    }
}

void Lowering::emit_step(int node) {
  const Node& n = g_.node(node);
  if (n.op == Op::Input || n.op == Op::Variable || plan_.view[node] || n.op == Op::Assign) {
    buffer_of(node);
    return;
  }
  if (plan_.host[node] >= 0) return;  // computed inside its first consumer's kernel
  if (is_library(n.op)) emit_library(node);
  else emit_kernel(node);
}

void Lowering::emit_library(int node) {
  const Node& n = g_.node(node);
  kir::LibraryCall call{.op = n.op, .inputs = {}, .output = -1, .attrs = n.attrs, .node = node};
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    int in = n.inputs[i];
    if (plan_.folded[in]) {
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
  recompute_here_.clear();
  kir::Kernel k = build_kernel(node);
  if (!knobs::recompute_in_readers_enabled()) return finish_kernel(std::move(k));
  // Values the plan lets readers recompute (FusionPlan::recompute_source) are computed again
  // here when this kernel loads the buffer their body reads anyway: one full-size load less.
  const std::set<int> loaded = kir::loaded_buffers(k);
  for (int b : loaded)
    for (int v : p_.buffers[b].nodes) {
      const int source = plan_.recompute_source[v];
      if (source >= 0 && node < plan_.recompute_before[v] && buffer_[source] >= 0 && loaded.count(buffer_[source]))
        recompute_here_.insert(v);
    }
  if (recompute_here_.empty()) return finish_kernel(std::move(k));
  kir::Kernel again = build_kernel(node);
  recompute_here_.clear();
  std::set<int> reads;
  for (const kir::Access& a : again.accesses) reads.insert(a.buffer);
  finish_kernel(static_cast<int>(reads.size()) <= limits_.max_reads ? std::move(again) : std::move(k));
}

void Lowering::finish_kernel(kir::Kernel k) {
  k.name = "k" + std::to_string(p_.kernels.size());
  for (size_t i = 0; i < k.nodes.size() && i < 4; ++i) k.name += "_" + std::string(op_name(g_.node(k.nodes[i]).op));
  p_.kernels.push_back(std::move(k));
  p_.steps.push_back({kir::Step::Kind::kernel, static_cast<int>(p_.kernels.size()) - 1});
}

kir::Kernel Lowering::build_kernel(int node) {
  const Node& n = g_.node(node);
  kir::Kernel k;
  root_ = node;
  const int out = buffer_of(node);
  if (op_kind(n.op) == OpKind::Reduce) {
    const Node& x = g_.node(n.inputs[0]);
    k.space = x.shape;
    k.reduce = n.op;
    k.reduce_axes = n.attrs.axes;
    // This reduction, then its siblings the plan put in this kernel (same space and axes).
    std::vector<kir::Kernel::Output> reductions;
    for (int r = node; r < g_.size(); ++r) {
      if (r != node && !(plan_.needed[r] && plan_.host[r] == node && op_kind(g_.node(r).op) == OpKind::Reduce))
        continue;
      const Node& rn = g_.node(r);
      if (r != node) k.nodes.push_back(r);
      const int value = expr(k, rn.inputs[0], identity_map(x.shape.rank()), false);
      IndexMap out_map;  // the output's coordinates in the input's loop space
      for (int i = 0; i < x.shape.rank(); ++i) {
        const bool reduced =
            std::find(k.reduce_axes.begin(), k.reduce_axes.end(), i) != k.reduce_axes.end();
        if (reduced && !rn.attrs.keepdims) continue;
        out_map.axis.push_back(reduced ? -1 : i);
        out_map.offset.push_back(0);
      }
      reductions.push_back({add_access(k, buffer_of(r), rn.shape, out_map), value, rn.op});
    }
    k.outputs.insert(k.outputs.begin(), reductions.begin(), reductions.end());
    // The elementwise values the plan computes beside the reductions (their bodies share the
    // reductions' input): inlined, stored on the side.
    for (int h = 0; h < g_.size(); ++h)
      if (plan_.needed[h] && plan_.host[h] == node && op_kind(g_.node(h).op) != OpKind::Reduce)
        expr(k, h, identity_map(x.shape.rank()), false);
  } else {
    k.space = n.shape;
    const IndexMap id = identity_map(n.shape.rank());
    const int value = expr(k, node, id, true);
    k.outputs.insert(k.outputs.begin(), {add_access(k, out, n.shape, id), value});
  }
  std::sort(k.nodes.begin(), k.nodes.end());
  k.nodes.erase(std::unique(k.nodes.begin(), k.nodes.end()), k.nodes.end());
  std::erase(k.nodes, node);
  k.nodes.insert(k.nodes.begin(), node);  // the root first: it names the kernel
  return k;
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
  if (!root && plan_.buffered[node] && plan_.kernel_root(node) == root_) {
    // Computed here for a later consumer too: inline it and store it on the side.
    const int value = expr(k, node, map, true);
    const int access = add_access(k, buffer_of(node), n.shape, map);
    const bool stored = std::any_of(k.outputs.begin(), k.outputs.end(),
                                    [&](const kir::Kernel::Output& o) { return o.access == access; });
    if (!stored) k.outputs.push_back({access, value});
    return value;
  }
  if (!root && plan_.buffered[node] && !recompute_here_.count(node)) {
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
    case Op::Iota: {  // the loop index its axis maps to, plus where a slice starts it
      const int axis = n.attrs.axis;
      int v = map.axis[axis] >= 0
                  ? add_expr(k, {.kind = K::loop_index, .op = n.op, .dtype = DType::i32, .axis = map.axis[axis]})
                  : add_expr(k, {.kind = K::constant, .op = Op::Constant, .dtype = DType::i32, .value = 0});
      if (map.offset[axis] != 0) {
        const int off = add_expr(k, {.kind = K::constant, .op = Op::Constant, .dtype = DType::i32,
                                     .value = static_cast<double>(map.offset[axis])});
        v = add_expr(k, {.kind = K::binary, .op = Op::Add, .dtype = DType::i32, .args = {v, off}});
      }
      if (n.dtype == DType::i32) return v;
      return add_expr(k, {.kind = K::unary, .op = Op::Cast, .dtype = n.dtype, .args = {v}});
    }
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
