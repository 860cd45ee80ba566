#include "jit/passes/conv_pools.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "jit/kir/drop_steps.h"
#include "jit/kir/views.h"

namespace towerjit {
namespace {

bool is_call(const kir::Program& p, int step, Op op) {
  return p.steps[step].kind == kir::Step::Kind::library && p.calls[p.steps[step].index].op == op;
}

bool two_by_two(const Attrs& at) {
  return at.kernel[0] == 2 && at.kernel[1] == 2 && at.stride[0] == 2 && at.stride[1] == 2 && !at.pad[0] && !at.pad[1];
}

// A convolution the pass takes: the pool's step and its gradients'.
struct Fusion {
  int pool = -1;
  std::vector<int> grads;
};

// The fusion of the convolution at step `s`, if the header's conditions hold.
std::optional<Fusion> fusion_at(const kir::Program& p, const kir::Uses& uses, int s) {
  const kir::LibraryCall& conv = p.calls[p.steps[s].index];
  const int y = conv.output;
  const kir::Buffer& yb = p.buffers[y];
  const Shape& ys = yb.shape;
  if (conv.codes >= 0 || yb.kind != kir::Buffer::Kind::temp || yb.alias_of >= 0 || yb.dtype != DType::f32 ||
      ys.rank() != 4)
    return std::nullopt;
  if (ys[2] == kBatch || ys[3] == kBatch || ys[2] % 2 || ys[3] % 2) return std::nullopt;
  for (const kir::Buffer& b : p.buffers)
    if (b.alias_of == y) return std::nullopt;
  if (std::count(p.fetches.begin(), p.fetches.end(), y) || uses.writers[y] != std::vector<int>{s}) return std::nullopt;

  const Shape pooled{ys[0], ys[1], ys[2] / 2, ys[3] / 2};
  Fusion f;
  for (int r : uses.readers[y]) {
    if (p.steps[r].kind != kir::Step::Kind::library) return std::nullopt;  // a kernel reads the result
    const kir::LibraryCall& c = p.calls[p.steps[r].index];
    if (is_call(p, r, Op::MaxPool2D) && f.pool < 0 && two_by_two(c.attrs)) {
      const kir::Buffer& out = p.buffers[c.output];
      if (out.dtype != DType::f32 || out.shape != pooled) return std::nullopt;
      f.pool = r;
    } else if (is_call(p, r, Op::MaxPool2DGrad) && two_by_two(c.attrs) && c.inputs.size() == 2 && c.inputs[0] == y &&
               c.inputs[1] != y && c.codes < 0) {
      const kir::Buffer& dy = p.buffers[c.inputs[1]];
      const kir::Buffer& dx = p.buffers[c.output];
      if (dy.dtype != DType::f32 || dy.shape != pooled || dx.dtype != DType::f32 || dx.shape != ys) return std::nullopt;
      f.grads.push_back(r);
    } else {
      return std::nullopt;  // another reader needs the result itself
    }
  }
  // The pool's output is written at the convolution's step instead.
  if (f.pool < 0 || kir::touched_between(p, p.calls[p.steps[f.pool].index].output, s, f.pool - 1, false))
    return std::nullopt;
  return f;
}

using K = kir::Expr::Kind;

int add(kir::Kernel& k, kir::Expr e) {
  k.exprs.push_back(std::move(e));
  return static_cast<int>(k.exprs.size()) - 1;
}
int access(kir::Kernel& k, kir::Access a) {
  k.accesses.push_back(std::move(a));
  return static_cast<int>(k.accesses.size()) - 1;
}

// Whether kernel `k` is the sum of dx alone over axes that include H and W (a convolution's
// bias gradient): one load of dx, row-major, summed.
bool sums_dx_alone(const kir::Program& p, const kir::Kernel& k, int dx) {
  const Shape& xs = p.buffers[dx].shape;
  if (!k.parts.empty() || !k.finishers.empty() || k.space != xs || k.exprs.size() != 1 || k.outputs.size() != 1 ||
      k.outputs[0].reduce != Op::ReduceSum || k.outputs[0].expr != 0)
    return false;
  auto reduced = [&](int axis) { return std::count(k.reduce_axes.begin(), k.reduce_axes.end(), axis) > 0; };
  const kir::Expr& e = k.exprs[0];
  if (!reduced(2) || !reduced(3) || e.kind != K::load || e.dtype != DType::f32) return false;
  const kir::Access& a = k.accesses[e.access];
  return a.buffer == dx && a.offset == kir::Affine{} && a.strides == kir::row_major_strides(xs);
}

// The sum over [N, C, H/2, W/2] of what the routed gradient gives each window, dy (with a
// ReLU's mask, dy where the code is below 4, else 0), for the sum of dx over [N, C, H, W]: the
// same terms but for zeros, in another order, so within the sum's bound of the old result.
// The mask is read from the pooled values `y`, not from the codes (a byte each, which kernels
// do not load): a code is below 4 where the winner is > 0, and the pooled value is the
// winner after the ReLU (x <= 0 gives 0, NaN stays NaN), so exactly where y > 0.
kir::Kernel sum_over_windows(const kir::Kernel& k, const kir::LibraryCall& grad, int y) {
  const int dy = grad.inputs[1];
  kir::Kernel out;
  out.name = k.name;
  out.nodes = k.nodes;
  out.nodes.push_back(grad.node);
  out.space = Shape{k.space[0], k.space[1], k.space[2] / 2, k.space[3] / 2};
  out.reduce = k.reduce;
  out.reduce_axes = k.reduce_axes;
  const std::vector<kir::Affine> rows = kir::row_major_strides(out.space);
  int value = add(out, {.kind = K::load, .dtype = DType::f32, .access = access(out, {.buffer = dy, .strides = rows})});
  if (grad.attrs.relu_mask) {
    const int pooled = add(out, {.kind = K::load, .dtype = DType::f32, .access = access(out, {.buffer = y, .strides = rows})});
    const int zero = add(out, {.kind = K::constant, .dtype = DType::f32, .value = 0});
    const int routed = add(out, {.kind = K::binary, .op = Op::Greater, .dtype = DType::f32, .args = {pooled, zero}});
    value = add(out, {.kind = K::select, .op = Op::Select, .dtype = DType::f32, .args = {routed, value, zero}});
  }
  out.outputs.push_back({.access = access(out, k.accesses[k.outputs[0].access]), .expr = value, .reduce = k.outputs[0].reduce});
  return out;
}

// Routes the gradient at step `gs` (a MaxPool2DGrad by codes) into every reader of its dx, where
// each is a convolution's gradient taking dx as its dy, or a sum of dx alone; true when it did
// (dx is then never stored, and the step can go).
bool route_to_readers(kir::Program& p, int gs, const std::map<int, int>& pooled_values) {
  const kir::LibraryCall grad = p.calls[p.steps[gs].index];
  const int y = pooled_values.at(grad.codes);
  const int dx = grad.output;
  const kir::Buffer& b = p.buffers[dx];
  if (b.kind != kir::Buffer::Kind::temp || b.alias_of >= 0 || std::count(p.fetches.begin(), p.fetches.end(), dx))
    return false;
  for (const kir::Buffer& other : p.buffers)
    if (other.alias_of == dx) return false;
  const kir::Uses uses = kir::uses_of(p);
  if (uses.writers[dx] != std::vector<int>{gs} || uses.readers[dx].empty()) return false;
  // What the gradient reads (and the bias sum's mask, the pooled values) stays as it was
  // until its last reader.
  for (int in : {grad.inputs[0], grad.inputs[1], y})
    if (kir::touched_between(p, in, gs, uses.readers[dx].back(), true)) return false;
  auto dy_operand = [](const kir::LibraryCall& c) {
    return c.op == Op::Conv2DGradInput ? 0 : c.op == Op::Conv2DGradFilter ? 1 : -1;
  };
  for (int r : uses.readers[dx]) {
    if (p.steps[r].kind == kir::Step::Kind::kernel) {
      if (!sums_dx_alone(p, p.kernels[p.steps[r].index], dx)) return false;
      continue;
    }
    if (p.steps[r].kind != kir::Step::Kind::library) return false;
    const kir::LibraryCall& c = p.calls[p.steps[r].index];
    const int operand = dy_operand(c);
    if (operand < 0 || c.codes >= 0 || c.inputs.size() != 2 || c.inputs[operand] != dx || c.inputs[1 - operand] == dx ||
        p.buffers[c.output].dtype != DType::f32 || p.buffers[c.inputs[1 - operand]].dtype != DType::f32)
      return false;
  }
  for (int r : uses.readers[dx]) {
    if (p.steps[r].kind == kir::Step::Kind::kernel) {
      kir::Kernel& k = p.kernels[p.steps[r].index];
      k = sum_over_windows(k, grad, y);
      continue;
    }
    kir::LibraryCall& c = p.calls[p.steps[r].index];
    c.inputs[dy_operand(c)] = grad.inputs[1];
    c.inputs.push_back(grad.codes);
    c.codes = grad.codes;
    c.attrs.relu_mask = grad.attrs.relu_mask;
  }
  return true;
}

}  // namespace

kir::Program pool_convolutions(kir::Program p) {
  const kir::Uses uses = kir::uses_of(p);
  std::set<int> pools;
  std::map<int, int> pooled_values;  // codes -> the pooled values written with them
  for (int s = 0; s < static_cast<int>(p.steps.size()); ++s) {
    if (!is_call(p, s, Op::Conv2D)) continue;
    const std::optional<Fusion> f = fusion_at(p, uses, s);
    if (!f) continue;
    const kir::LibraryCall& pool = p.calls[p.steps[f->pool].index];
    const int codes = static_cast<int>(p.buffers.size());
    const Shape& pooled = p.buffers[pool.output].shape;
    p.buffers.push_back({.kind = kir::Buffer::Kind::temp,
                         .shape = Shape{pooled[0], kir::pool_code_words(pooled[1] * pooled[2] * pooled[3])},
                         .dtype = DType::i32, .name = "t" + std::to_string(codes)});
    pooled_values[codes] = pool.output;
    kir::LibraryCall& conv = p.calls[p.steps[s].index];
    conv.output = pool.output;
    conv.codes = codes;
    conv.epilogue_nodes.push_back(pool.node);
    for (int g : f->grads) {
      kir::LibraryCall& grad = p.calls[p.steps[g].index];
      grad.inputs[0] = codes;
      grad.codes = codes;
    }
    pools.insert(f->pool);
  }
  p = kir::drop_steps(std::move(p), pools);

  // Then each gradient into the steps that read it, where all of them can take it.
  std::set<int> routed;
  for (int s = 0; s < static_cast<int>(p.steps.size()); ++s)
    if (is_call(p, s, Op::MaxPool2DGrad) && p.calls[p.steps[s].index].codes >= 0 && route_to_readers(p, s, pooled_values))
      routed.insert(s);
  return kir::drop_steps(std::move(p), routed);
}

}  // namespace towerjit
