#include "jit/passes/matmul_epilogues.h"

#include <algorithm>

#include "jit/knobs.h"

namespace towerjit {
namespace {

using kir::Affine;
using K = kir::Expr::Kind;

// Row-major strides of `shape`, as the lowering writes an access that walks a whole buffer.
std::vector<Affine> row_major(const Shape& shape) {
  std::vector<Affine> strides(shape.rank());
  Affine s{1, 0};
  for (int i = shape.rank() - 1; i >= 0; --i) {
    strides[i] = s;
    s = shape[i] == kBatch ? Affine{0, s.c} : Affine{s.c * shape[i], s.b * shape[i]};
  }
  return strides;
}

// The buffer whose elements `b` are (a view's source, followed to the end).
int root_of(const kir::Program& p, int b) {
  while (p.buffers[b].alias_of >= 0) b = p.buffers[b].alias_of;
  return b;
}

// Whether step `s` reads or writes buffer `b`, or a view sharing its elements.
bool touches(const kir::Program& p, const kir::Step& step, int b, bool writes_only) {
  const int r = root_of(p, b);
  auto same = [&](int other) { return other >= 0 && root_of(p, other) == r; };
  if (step.kind == kir::Step::Kind::kernel) {
    for (const kir::Kernel* k : p.kernels[step.index].bodies()) {
      for (const auto& o : k->outputs)
        if (same(k->accesses[o.access].buffer)) return true;
      if (!writes_only)
        for (const kir::Access& a : k->accesses)
          if (same(a.buffer)) return true;
    }
    return false;
  }
  if (step.kind == kir::Step::Kind::library) {
    const kir::LibraryCall& c = p.calls[step.index];
    return same(c.output) || (!writes_only && std::any_of(c.inputs.begin(), c.inputs.end(), same));
  }
  return same(p.copies[step.index].to) || (!writes_only && same(p.copies[step.index].from));
}

// The epilogue kernel `k` computes on product `from` of shape `shape`, with its bias buffer
// and output buffer; epilogue none when `k` is anything more than act(from + bias) stored once.
struct Match {
  kir::MatMulEpilogue epilogue = kir::MatMulEpilogue::none;
  int bias = -1, output = -1;
};

Match match_kernel(const kir::Program& p, const kir::Kernel& k, int from, const Shape& shape) {
  if (!k.parts.empty() || k.reduce != Op::Constant || k.outputs.size() != 1 || k.space != shape) return {};
  for (const kir::Expr& e : k.exprs)
    if (e.dtype != DType::f32) return {};
  const kir::Expr* top = &k.exprs[k.outputs[0].expr];
  const bool relu = top->kind == K::unary && top->op == Op::Relu;
  if (relu) top = &k.exprs[top->args[0]];
  if (top->kind != K::binary || top->op != Op::Add || k.exprs.size() != (relu ? 4u : 3u)) return {};
  const int n = shape.rank();
  std::vector<Affine> per_column(n);
  per_column[n - 1] = Affine{1, 0};
  const std::vector<Affine> whole = row_major(shape);
  int product = -1, bias = -1;
  for (int arg : top->args) {
    const kir::Expr& e = k.exprs[arg];
    if (e.kind != K::load) return {};
    const kir::Access& a = k.accesses[e.access];
    if (a.offset != Affine{} || a.buffer < 0) return {};
    if (a.buffer == from && a.strides == whole) product = a.buffer;
    else if (a.strides == per_column) bias = a.buffer;
  }
  if (product < 0 || bias < 0 || p.buffers[bias].dtype != DType::f32) return {};
  const kir::Access& store = k.accesses[k.outputs[0].access];
  const kir::Buffer& out = p.buffers[store.buffer];
  if (store.offset != Affine{} || store.strides != whole || out.shape != shape || out.dtype != DType::f32 ||
      out.kind != kir::Buffer::Kind::temp || out.alias_of >= 0)
    return {};
  return {relu ? kir::MatMulEpilogue::bias_relu : kir::MatMulEpilogue::bias, bias, store.buffer};
}

// Tries the call at step `s`; true when it took its epilogue kernel in.
bool fuse(kir::Program& p, int s) {
  kir::LibraryCall& c = p.calls[p.steps[s].index];
  if (c.op != Op::MatMul || c.sum_batches || c.epilogue != kir::MatMulEpilogue::none || c.inputs.size() != 2)
    return false;
  const int product = c.output;
  const kir::Buffer& buffer = p.buffers[product];
  if (buffer.dtype != DType::f32 || buffer.alias_of >= 0 ||
      std::count(p.fetches.begin(), p.fetches.end(), product) > 0)
    return false;
  for (const kir::Buffer& other : p.buffers)
    if (other.alias_of == product) return false;
  // The product's one reader, after it.
  int reader = -1;
  for (int t = 0; t < static_cast<int>(p.steps.size()); ++t) {
    if (t == s || !touches(p, p.steps[t], product, false)) continue;
    if (reader >= 0 || t < s || p.steps[t].kind != kir::Step::Kind::kernel) return false;
    reader = t;
  }
  if (reader < 0) return false;
  const Match m = match_kernel(p, p.kernels[p.steps[reader].index], product, buffer.shape);
  if (m.epilogue == kir::MatMulEpilogue::none) return false;
  // The call now runs the kernel's work at its own place: nothing in between may write the
  // bias, or touch the output.
  for (int t = s + 1; t < reader; ++t)
    if (touches(p, p.steps[t], m.bias, true) || touches(p, p.steps[t], m.output, false)) return false;
  c.inputs.push_back(m.bias);
  c.output = m.output;
  c.epilogue = m.epilogue;
  const int kernel = p.steps[reader].index;
  c.epilogue_nodes = p.kernels[kernel].nodes;
  p.steps.erase(p.steps.begin() + reader);
  p.kernels.erase(p.kernels.begin() + kernel);
  for (kir::Step& step : p.steps)
    if (step.kind == kir::Step::Kind::kernel && step.index > kernel) --step.index;
  return true;
}

}  // namespace

kir::Program fuse_matmul_epilogues(kir::Program p) {
  if (!knobs::matmul_epilogues_enabled()) return p;
  for (int s = 0; s < static_cast<int>(p.steps.size()); ++s)
    if (p.steps[s].kind == kir::Step::Kind::library) fuse(p, s);
  return p;
}

}  // namespace towerjit
