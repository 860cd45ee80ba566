#include "jit/passes/conv_pools.h"

#include <algorithm>
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

}  // namespace

kir::Program pool_convolutions(kir::Program p) {
  const kir::Uses uses = kir::uses_of(p);
  std::set<int> pools;
  for (int s = 0; s < static_cast<int>(p.steps.size()); ++s) {
    if (!is_call(p, s, Op::Conv2D)) continue;
    const std::optional<Fusion> f = fusion_at(p, uses, s);
    if (!f) continue;
    const kir::LibraryCall& pool = p.calls[p.steps[f->pool].index];
    const int codes = static_cast<int>(p.buffers.size());
    p.buffers.push_back({.kind = kir::Buffer::Kind::temp, .shape = p.buffers[pool.output].shape,
                         .dtype = DType::i32, .name = "t" + std::to_string(codes)});
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
  return kir::drop_steps(std::move(p), pools);
}

}  // namespace towerjit
