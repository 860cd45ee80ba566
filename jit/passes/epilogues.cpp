#include "jit/passes/epilogues.h"

#include <algorithm>

#include "jit/kir/views.h"
#include "jit/knobs.h"

namespace towerjit {
namespace {

using kir::Affine;
using K = kir::Expr::Kind;

// Whether two accesses over `shape` read the same elements: equal strides on every axis but
// those of extent 1, which any stride walks alike.
bool same_walk(const std::vector<Affine>& a, const std::vector<Affine>& b, const Shape& shape) {
  if (a.size() != b.size() || static_cast<int>(a.size()) != shape.rank()) return false;
  for (int i = 0; i < shape.rank(); ++i)
    if (shape[i] != 1 && a[i] != b[i]) return false;
  return true;
}

// The epilogue kernel `k` computes on result `from` of shape `shape`, with its bias buffer and
// output buffer; epilogue none when `k` is anything more than act(from + bias) stored once,
// with the bias read at `bias_strides` (a product's per column, a convolution's per channel).
struct Match {
  kir::Epilogue epilogue = kir::Epilogue::none;
  int bias = -1, output = -1;
};

Match match_kernel(const kir::Program& p, const kir::Kernel& k, int from, const Shape& shape,
                   const std::vector<Affine>& bias_strides) {
  if (!k.parts.empty() || k.reduce != Op::Constant || k.outputs.size() != 1 || k.space != shape) return {};
  for (const kir::Expr& e : k.exprs)
    if (e.dtype != DType::f32) return {};
  const kir::Expr* top = &k.exprs[k.outputs[0].expr];
  const bool relu = top->kind == K::unary && top->op == Op::Relu;
  if (relu) top = &k.exprs[top->args[0]];
  if (top->kind != K::binary || top->op != Op::Add || k.exprs.size() != (relu ? 4u : 3u)) return {};
  const std::vector<Affine> whole = kir::row_major_strides(shape);
  int result = -1, bias = -1;
  for (int arg : top->args) {
    const kir::Expr& e = k.exprs[arg];
    if (e.kind != K::load) return {};
    const kir::Access& a = k.accesses[e.access];
    if (a.offset != Affine{} || a.buffer < 0) return {};
    if (a.buffer == from && same_walk(a.strides, whole, shape)) result = a.buffer;
    else if (same_walk(a.strides, bias_strides, shape)) bias = a.buffer;
  }
  if (result < 0 || bias < 0 || p.buffers[bias].dtype != DType::f32) return {};
  const kir::Access& store = k.accesses[k.outputs[0].access];
  const kir::Buffer& out = p.buffers[store.buffer];
  if (store.offset != Affine{} || !same_walk(store.strides, whole, shape) || out.shape != shape || out.dtype != DType::f32 ||
      out.kind != kir::Buffer::Kind::temp || out.alias_of >= 0)
    return {};
  return {relu ? kir::Epilogue::bias_relu : kir::Epilogue::bias, bias, store.buffer};
}

// Where a call's bias is read, one stride per axis of its result: a product's [.., rows,
// columns] per column, a convolution's [N, O, OH, OW] per output channel; empty for a call that
// takes no epilogue (or whose kind is switched off).
std::vector<Affine> bias_strides(const kir::LibraryCall& c, const Shape& result) {
  std::vector<Affine> strides(result.rank());
  if (c.op == Op::MatMul && !c.sum_batches && knobs::matmul_epilogues_enabled()) {
    strides.back() = Affine{1, 0};
    return strides;
  }
  if (c.op == Op::Conv2D && result.rank() == 4 && knobs::conv_epilogues_enabled()) {
    strides[1] = Affine{1, 0};
    return strides;
  }
  return {};
}

// Tries the call at step `s`; true when it took its epilogue kernel in.
bool fuse(kir::Program& p, int s) {
  kir::LibraryCall& c = p.calls[p.steps[s].index];
  if (c.epilogue != kir::Epilogue::none || c.inputs.size() != 2) return false;
  const int result = c.output;
  const kir::Buffer& buffer = p.buffers[result];
  const std::vector<Affine> bias_at = bias_strides(c, buffer.shape);
  if (bias_at.empty() || buffer.dtype != DType::f32 || buffer.alias_of >= 0 ||
      std::count(p.fetches.begin(), p.fetches.end(), result) > 0)
    return false;
  for (const kir::Buffer& other : p.buffers)
    if (other.alias_of == result) return false;
  // The result's one reader, after it.
  int reader = -1;
  for (int t = 0; t < static_cast<int>(p.steps.size()); ++t) {
    if (t == s || !kir::touches(p, p.steps[t], result, false)) continue;
    if (reader >= 0 || t < s || p.steps[t].kind != kir::Step::Kind::kernel) return false;
    reader = t;
  }
  if (reader < 0) return false;
  const Match m = match_kernel(p, p.kernels[p.steps[reader].index], result, buffer.shape, bias_at);
  if (m.epilogue == kir::Epilogue::none) return false;
  // The call now runs the kernel's work at its own place: nothing in between may write the
  // bias, or touch the output.
  for (int t = s + 1; t < reader; ++t)
    if (kir::touches(p, p.steps[t], m.bias, true) || kir::touches(p, p.steps[t], m.output, false)) return false;
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

kir::Program fuse_epilogues(kir::Program p) {
  for (int s = 0; s < static_cast<int>(p.steps.size()); ++s)
    if (p.steps[s].kind == kir::Step::Kind::library) fuse(p, s);
  return p;
}

}  // namespace towerjit
