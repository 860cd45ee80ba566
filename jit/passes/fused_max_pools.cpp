#include "jit/passes/fused_max_pools.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "jit/kir/drop_steps.h"
#include "jit/kir/views.h"

namespace towerjit {
namespace {

using kir::Affine;
using kir::touched_between;
using kir::Uses;
using kir::uses_of;
using K = kir::Expr::Kind;

int add(kir::Kernel& k, kir::Expr e) {
  k.exprs.push_back(std::move(e));
  return static_cast<int>(k.exprs.size()) - 1;
}
int constant(kir::Kernel& k, double v, DType t) { return add(k, {.kind = K::constant, .dtype = t, .value = v}); }
int binary(kir::Kernel& k, Op op, DType t, int a, int b) {
  return add(k, {.kind = K::binary, .op = op, .dtype = t, .args = {a, b}});
}
int select(kir::Kernel& k, DType t, int cond, int a, int b) {
  return add(k, {.kind = K::select, .op = Op::Select, .dtype = t, .args = {cond, a, b}});
}
int access(kir::Kernel& k, kir::Access a) {
  k.accesses.push_back(std::move(a));
  return static_cast<int>(k.accesses.size()) - 1;
}

bool row_major(const kir::Access& a, const Shape& shape) {
  return a.offset == Affine{} && a.strides == kir::row_major_strides(shape);
}

// A pool the pass takes: the kernel step that makes its input, its own step, its gradients'.
struct Fusion {
  int producer = -1, pool = -1;
  std::vector<int> grads;
};

bool is_call(const kir::Program& p, int step, Op op) {
  return p.steps[step].kind == kir::Step::Kind::library && p.calls[p.steps[step].index].op == op;
}

// The fusion of the max pool at step `s`, if the header's conditions hold.
std::optional<Fusion> fusion_at(const kir::Program& p, const Uses& uses, int s) {
  const kir::LibraryCall& pool = p.calls[p.steps[s].index];
  const Attrs& at = pool.attrs;
  if (at.kernel[0] != 2 || at.kernel[1] != 2 || at.stride[0] != 2 || at.stride[1] != 2 || at.pad[0] || at.pad[1])
    return std::nullopt;
  const int x = pool.inputs[0];
  const kir::Buffer& xb = p.buffers[x];
  const Shape& xs = xb.shape;
  const DType t = xb.dtype;  // f32, or the precision policy's 16-bit feature maps
  if (xb.kind != kir::Buffer::Kind::temp || xb.alias_of >= 0 || !is_real(t) || xs.rank() != 4) return std::nullopt;
  if (xs[2] == kBatch || xs[3] == kBatch || xs[2] % 2 || xs[3] % 2) return std::nullopt;
  const Shape pooled{xs[0], xs[1], xs[2] / 2, xs[3] / 2};
  const kir::Buffer& pb = p.buffers[pool.output];
  if (pb.dtype != t || pb.shape != pooled) return std::nullopt;
  for (const kir::Buffer& b : p.buffers)
    if (b.alias_of == x) return std::nullopt;
  if (std::count(p.fetches.begin(), p.fetches.end(), x)) return std::nullopt;

  if (uses.writers[x].size() != 1) return std::nullopt;
  Fusion f{.producer = uses.writers[x][0], .pool = s};
  if (p.steps[f.producer].kind != kir::Step::Kind::kernel || f.producer > s) return std::nullopt;
  // The pool's output is stored at the producer's step instead: nothing in between may touch it.
  if (touched_between(p, pool.output, f.producer, s - 1, /*writes_only=*/false)) return std::nullopt;
  const kir::Kernel& k = p.kernels[p.steps[f.producer].index];
  if (!k.parts.empty() || !k.finishers.empty() || k.reduce != Op::Constant || k.outputs.size() != 1) return std::nullopt;
  if (k.space != xs || !row_major(k.accesses[k.outputs[0].access], xs)) return std::nullopt;
  // The value stored is the one the routine compares: a 16-bit input's is the producer's cast
  // to 16 bits (values become 16-bit only through a cast), already rounded.
  if (k.exprs[k.outputs[0].expr].dtype != t) return std::nullopt;
  for (const kir::Expr& e : k.exprs)  // an index as a value would need 2i + d
    if (e.kind == K::loop_index) return std::nullopt;

  for (int r : uses.readers[x]) {
    if (r == s) continue;
    if (!is_call(p, r, Op::MaxPool2DGrad)) return std::nullopt;  // the producer reading x is one
    const kir::LibraryCall& g = p.calls[p.steps[r].index];
    const kir::Buffer& dy = p.buffers[g.inputs.back()];
    const kir::Buffer& dx = p.buffers[g.output];
    if (g.inputs.size() != 2 || g.inputs[0] != x || g.inputs[1] == x || g.attrs.kernel[0] != 2 ||
        g.attrs.kernel[1] != 2 || g.attrs.stride[0] != 2 || g.attrs.stride[1] != 2 || g.attrs.pad[0] || g.attrs.pad[1])
      return std::nullopt;
    if (dy.dtype != t || dy.shape != pooled || dx.dtype != t || dx.shape != xs) return std::nullopt;
    f.grads.push_back(r);
  }
  return f;
}

// `a` at window position (dy, dx) of the pooled point: the pooled axes 2 and 3 step twice as far.
kir::Access at_window(kir::Access a, int dy, int dx) {
  a.offset = a.offset + a.strides[2] * dy + a.strides[3] * dx;
  a.strides[2] = a.strides[2] * 2;
  a.strides[3] = a.strides[3] * 2;
  return a;
}

// The producer over the pooled points: its value at the window's four points, the first
// maximum of them (tj_window_argmax's order and NaN rule) stored to the pool's output, and the
// code (the header's) stored to `code`.
kir::Kernel pooling_producer(const kir::Kernel& k, const kir::LibraryCall& pool, const Shape& pooled, int code) {
  kir::Kernel out;
  out.name = k.name + "_max_pool2d";
  out.space = pooled;
  out.nodes = k.nodes;
  out.nodes.push_back(pool.node);
  out.evaluations = 4 * k.evaluations;  // the window's points (the pool's compares counted with them)
  int best = -1, arg = -1;
  for (int w = 0; w < 4; ++w) {
    const int dy = w / 2, dx = w % 2;
    std::vector<int> to(k.exprs.size());
    for (size_t i = 0; i < k.exprs.size(); ++i) {
      kir::Expr e = k.exprs[i];
      for (int& a : e.args) a = to[a];
      if (e.access >= 0) e.access = access(out, at_window(k.accesses[e.access], dy, dx));
      to[i] = add(out, e);  // a random draw's access too: its index is the window point's
    }
    const int v = to[k.outputs[0].expr];
    if (w == 0) {
      best = v, arg = constant(out, 0, DType::i32);
      continue;
    }
    const int greater = binary(out, Op::Greater, DType::f32, v, best);
    const int nan_over_number = binary(out, Op::Mul, DType::f32, binary(out, Op::NotEqual, DType::f32, v, v),
                                       binary(out, Op::Equal, DType::f32, best, best));  // 0/1 and 0/1
    const int wins = binary(out, Op::Max, DType::f32, greater, nan_over_number);
    best = select(out, DType::f32, wins, v, best);
    arg = select(out, DType::i32, wins, constant(out, w, DType::i32), arg);
  }
  const int positive = binary(out, Op::Greater, DType::f32, best, constant(out, 0, DType::f32));
  const int code_value = binary(out, Op::Add, DType::i32, arg,
                                select(out, DType::i32, positive, constant(out, 0, DType::i32), constant(out, 4, DType::i32)));
  const std::vector<Affine> rows = kir::row_major_strides(pooled);
  out.outputs.push_back({.access = access(out, {.buffer = pool.output, .strides = rows}), .expr = best});
  out.outputs.push_back({.access = access(out, {.buffer = code, .strides = rows}), .expr = code_value});
  return out;
}

// The gradient over [N, C, H/2, 2, W/2, 2] (row-major, the input's own order): dx is 0 + dy at
// the position the code names, +0 elsewhere.
kir::Kernel routing_gradient(const std::string& name, const kir::LibraryCall& grad, const Shape& pooled, DType t,
                             int code) {
  kir::Kernel out;
  out.name = name;
  out.space = Shape{pooled[0], pooled[1], pooled[2], 2, pooled[3], 2};
  out.nodes = {grad.node};
  const std::vector<Affine> rows = kir::row_major_strides(pooled);
  const std::vector<Affine> at_pooled{rows[0], rows[1], rows[2], Affine{}, rows[3], Affine{}};
  const int c = add(out, {.kind = K::load, .dtype = DType::i32, .access = access(out, {.buffer = code, .strides = at_pooled})});
  const int dy = add(out, {.kind = K::load, .dtype = t,
                           .access = access(out, {.buffer = grad.inputs[1], .strides = at_pooled})});
  const int row = add(out, {.kind = K::loop_index, .op = Op::Iota, .dtype = DType::i32, .axis = 3});
  const int col = add(out, {.kind = K::loop_index, .op = Op::Iota, .dtype = DType::i32, .axis = 5});
  const int position =
      binary(out, Op::Add, DType::i32, binary(out, Op::Mul, DType::i32, row, constant(out, 2, DType::i32)), col);
  int hit = binary(out, Op::Equal, DType::i32, c, position);
  if (!grad.attrs.relu_mask)  // the winner's sign aside: code p or p + 4
    hit = binary(out, Op::Max, DType::i32, hit,
                 binary(out, Op::Equal, DType::i32, c,
                        binary(out, Op::Add, DType::i32, position, constant(out, 4, DType::i32))));
  const int zero = constant(out, 0, DType::f32);
  const int dx = binary(out, Op::Add, DType::f32, select(out, DType::f32, hit, dy, zero), zero);
  out.outputs.push_back(
      {.access = access(out, {.buffer = grad.output, .strides = kir::row_major_strides(out.space)}), .expr = dx});
  return out;
}

// `base` + "_max_pool2d_grad", with a count after it where that name is taken.
std::string unique_name(const kir::Program& p, const std::string& base) {
  auto taken = [&](const std::string& n) {
    return std::any_of(p.kernels.begin(), p.kernels.end(), [&](const kir::Kernel& k) { return k.name == n; });
  };
  std::string name = base + "_max_pool2d_grad";
  for (int i = 2; taken(name); ++i) name = base + "_max_pool2d_grad" + std::to_string(i);
  return name;
}

// The axes of [N, C, H, W] split as [N, C, H/2, 2, W/2, 2]: a stride s along H or W becomes
// 2s along the pooled axis and s along the window's.
kir::Access split_axes(kir::Access a) {
  const Affine h = a.strides[2], w = a.strides[3];
  a.strides = {a.strides[0], a.strides[1], h * 2, h, w * 2, w};
  return a;
}

// Whether `r` can compute the routed gradient `g` (over the split space) where it loads
// g's output: a plain kernel over that output's shape (or already over the split space, having
// taken another pool's gradient), loading it only row-major, that neither indexes H or W by
// value nor writes what g reads.
bool can_route(const kir::Program& p, const kir::Kernel& r, const kir::Kernel& g) {
  const int dx = g.accesses[g.outputs[0].access].buffer;
  if (!r.parts.empty() || !r.finishers.empty()) return false;
  const bool split = r.space == g.space;  // it took another pool's gradient: its indices are the split space's
  if (!split && r.space != p.buffers[dx].shape) return false;
  for (const kir::Expr& e : r.exprs) {
    if (!split && e.kind == K::loop_index && e.axis >= 2) return false;
    if (e.kind == K::load && r.accesses[e.access].buffer == dx && !row_major(r.accesses[e.access], r.space)) return false;
  }
  for (const auto& o : r.outputs)
    for (const kir::Access& a : g.accesses)
      if (r.accesses[o.access].buffer == a.buffer) return false;
  return true;
}

// `r` over the split space, with g's body where it loaded g's output.
kir::Kernel route_into(const kir::Kernel& r, const kir::Kernel& g) {
  const int dx = g.accesses[g.outputs[0].access].buffer;
  kir::Kernel out = r;
  out.nodes.insert(out.nodes.end(), g.nodes.begin(), g.nodes.end());
  if (r.space != g.space) {
    out.space = g.space;
    for (kir::Access& a : out.accesses) a = split_axes(a);
    out.reduce_axes.clear();
    for (int a : r.reduce_axes)
      for (int b : a < 2 ? std::vector<int>{a} : std::vector<int>{2 * a - 2, 2 * a - 1}) out.reduce_axes.push_back(b);
  }
  out.exprs.clear();
  std::vector<int> to(r.exprs.size());
  for (size_t i = 0; i < r.exprs.size(); ++i) {
    const kir::Expr& e = r.exprs[i];
    if (e.kind == K::load && r.accesses[e.access].buffer == dx) {
      std::vector<int> from_g(g.exprs.size());
      for (size_t j = 0; j < g.exprs.size(); ++j) {
        kir::Expr c = g.exprs[j];
        for (int& a : c.args) a = from_g[a];
        if (c.access >= 0) c.access = access(out, g.accesses[c.access]);
        from_g[j] = add(out, c);
      }
      to[i] = from_g[g.outputs[0].expr];
      continue;
    }
    kir::Expr c = e;
    for (int& a : c.args) a = to[a];
    to[i] = add(out, c);
  }
  for (auto& o : out.outputs) o.expr = to[o.expr];
  // dx's access is read no more: drop it (and any other unread one), so nothing takes dx for
  // read here (the buffer plan, the kernel's parameters).
  std::vector<int> kept(out.accesses.size(), -1);
  std::vector<kir::Access> accesses;
  auto keep = [&](int& a) {
    if (kept[a] < 0) kept[a] = static_cast<int>(accesses.size()), accesses.push_back(out.accesses[a]);
    a = kept[a];
  };
  for (kir::Expr& e : out.exprs)
    if (e.access >= 0) keep(e.access);
  for (auto& o : out.outputs) keep(o.access);
  out.accesses = std::move(accesses);
  return out;
}

// Every kernel that reads the routed gradient at step `gs` computes it instead, where all can;
// then that step goes (the caller drops it).
bool route_to_readers(kir::Program& p, int gs) {
  const kir::Kernel& g = p.kernels[p.steps[gs].index];
  const int dx = g.accesses[g.outputs[0].access].buffer;
  if (std::count(p.fetches.begin(), p.fetches.end(), dx)) return false;
  for (const kir::Buffer& b : p.buffers)
    if (b.alias_of == dx) return false;
  const Uses uses = uses_of(p);
  if (uses.readers[dx].empty()) return false;
  for (const kir::Access& a : g.accesses)  // what g reads stays as it was until its last reader
    if (a.buffer != dx && touched_between(p, a.buffer, gs, uses.readers[dx].back(), /*writes_only=*/true))
      return false;
  for (int s : uses.readers[dx])
    if (p.steps[s].kind != kir::Step::Kind::kernel || !can_route(p, p.kernels[p.steps[s].index], g)) return false;
  for (int s : uses.readers[dx]) p.kernels[p.steps[s].index] = route_into(p.kernels[p.steps[s].index], g);
  return true;
}

}  // namespace

kir::Program fuse_max_pools(kir::Program p) {
  const Uses uses = uses_of(p);
  std::set<int> pools;              // the pools' steps
  std::set<std::string> gradients;  // the routing gradients' kernels, by name
  for (int s = 0; s < static_cast<int>(p.steps.size()); ++s) {
    if (!is_call(p, s, Op::MaxPool2D)) continue;
    const std::optional<Fusion> f = fusion_at(p, uses, s);
    if (!f) continue;
    const kir::LibraryCall& pool = p.calls[p.steps[s].index];
    const Shape& xs = p.buffers[pool.inputs[0]].shape;
    const Shape pooled{xs[0], xs[1], xs[2] / 2, xs[3] / 2};
    const DType t = p.buffers[pool.inputs[0]].dtype;
    const int code = static_cast<int>(p.buffers.size());
    p.buffers.push_back({.kind = kir::Buffer::Kind::temp, .shape = pooled, .dtype = DType::i32,
                         .name = "t" + std::to_string(code)});
    kir::Kernel& producer = p.kernels[p.steps[f->producer].index];
    const std::string base = producer.name.substr(0, producer.name.find('_'));  // "k14"
    producer = pooling_producer(producer, pool, pooled, code);
    pools.insert(s);
    for (int g : f->grads) {  // each gradient's call step runs its kernel instead
      kir::Kernel k = routing_gradient(unique_name(p, base), p.calls[p.steps[g].index], pooled, t, code);
      gradients.insert(k.name);
      p.kernels.push_back(std::move(k));
      p.steps[g] = {kir::Step::Kind::kernel, static_cast<int>(p.kernels.size()) - 1};
    }
  }
  p = kir::drop_steps(std::move(p), pools);  // the gradients' calls go too: no step runs them

  // Then each gradient into the kernels that read it, where all of them can take it.
  std::set<int> routed;
  for (int s = 0; s < static_cast<int>(p.steps.size()); ++s)
    if (p.steps[s].kind == kir::Step::Kind::kernel && gradients.count(p.kernels[p.steps[s].index].name) &&
        route_to_readers(p, s))
      routed.insert(s);
  return kir::drop_steps(std::move(p), routed);
}

}  // namespace towerjit
