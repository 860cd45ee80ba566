#include "jit/passes/fold_batch_sums.h"

#include <algorithm>

namespace towerjit {
namespace {

using kir::Affine;

// Every step that reads or writes buffer `b` (a group's parts included).
std::vector<int> steps_touching(const kir::Program& p, int b) {
  std::vector<int> found;
  for (int s = 0; s < static_cast<int>(p.steps.size()); ++s) {
    const kir::Step& step = p.steps[s];
    bool touches = false;
    if (step.kind == kir::Step::Kind::kernel) {
      for (const kir::Kernel* k : p.kernels[step.index].bodies())
        for (const kir::Access& a : k->accesses) touches = touches || a.buffer == b;
    } else if (step.kind == kir::Step::Kind::library) {
      const kir::LibraryCall& c = p.calls[step.index];
      touches = c.output == b || std::count(c.inputs.begin(), c.inputs.end(), b) > 0;
    } else {
      touches = p.copies[step.index].from == b || p.copies[step.index].to == b;
    }
    if (touches) found.push_back(s);
  }
  return found;
}

bool aliased(const kir::Program& p, int b) {
  if (p.buffers[b].alias_of >= 0) return true;
  for (const kir::Buffer& other : p.buffers)
    if (other.alias_of == b) return true;
  return false;
}

// Kernel `k` stores, for every [M, N] position, the sum over the leading axes of `from`'s
// element there, and nothing else: the output buffer when so, else -1.
int plain_batch_sum(const kir::Kernel& k, int from, const Shape& from_shape) {
  const int rank = k.space.rank();
  if (!k.parts.empty() || k.space != from_shape || k.outputs.size() != 1 || k.reduce != Op::ReduceSum) return -1;
  std::vector<int> leading(rank - 2);
  for (int i = 0; i < rank - 2; ++i) leading[i] = i;
  if (k.reduce_axes != leading) return -1;
  const kir::Kernel::Output& o = k.outputs[0];
  const kir::Expr& e = k.exprs[o.expr];
  if (e.kind != kir::Expr::Kind::load || e.dtype != DType::f32) return -1;
  const kir::Access& in = k.accesses[e.access];
  if (in.buffer != from || in.strides != kir::row_major_strides(from_shape) || in.offset != Affine{}) return -1;
  const kir::Access& out = k.accesses[o.access];
  std::vector<Affine> want(rank);
  want[rank - 2] = Affine{from_shape[rank - 1], 0}, want[rank - 1] = Affine{1, 0};
  if (out.buffer < 0 || out.strides != want || out.offset != Affine{}) return -1;
  return out.buffer;
}

}  // namespace

kir::Program fold_batch_summed_products(kir::Program p) {
  for (int s = 0; s < static_cast<int>(p.steps.size()); ++s) {
    if (p.steps[s].kind != kir::Step::Kind::library) continue;
    kir::LibraryCall& c = p.calls[p.steps[s].index];
    if (c.op != Op::MatMul || !c.transpose_a || c.transpose_b || c.sum_batches) continue;
    const Shape& a = p.buffers[c.inputs[0]].shape;
    const Shape& b = p.buffers[c.inputs[1]].shape;
    const Shape& out = p.buffers[c.output].shape;
    const int rank = out.rank();
    if (rank < 3 || a.rank() != rank || b.rank() != rank || p.buffers[c.output].dtype != DType::f32) continue;
    bool same_batches = true;  // stacked along k only when neither operand is broadcast
    for (int i = 0; i < rank - 2; ++i) same_batches = same_batches && a[i] == out[i] && b[i] == out[i];
    if (!same_batches || aliased(p, c.output) ||
        std::count(p.fetches.begin(), p.fetches.end(), c.output) > 0)
      continue;
    const std::vector<int> users = steps_touching(p, c.output);
    if (users.size() != 2 || users[0] != s || p.steps[users[1]].kind != kir::Step::Kind::kernel) continue;
    const int kernel = p.steps[users[1]].index;
    const int sum = plain_batch_sum(p.kernels[kernel], c.output, out);
    if (sum < 0) continue;
    c.output = sum;
    c.sum_batches = true;
    p.steps.erase(p.steps.begin() + users[1]);
    p.kernels.erase(p.kernels.begin() + kernel);
    for (kir::Step& step : p.steps)
      if (step.kind == kir::Step::Kind::kernel && step.index > kernel) --step.index;
  }
  return p;
}

}  // namespace towerjit
