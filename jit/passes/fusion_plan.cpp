#include "jit/passes/fusion_plan.h"

#include <algorithm>
#include <set>

#include "dsl/error.h"

namespace towerjit {

bool is_library(Op op) {
  switch (op) {
    case Op::MatMul: case Op::OneHot: case Op::ArgMax: case Op::Conv2D:
    case Op::Conv2DGradInput: case Op::Conv2DGradFilter: case Op::MaxPool2D:
    case Op::MaxPool2DGrad: case Op::AvgPool2D: case Op::AvgPool2DGrad: case Op::Pad:
    case Op::Concat: case Op::Gather: case Op::GatherGrad: case Op::CombineRows: case Op::ScatterRows:
    case Op::Attention: case Op::AttentionGradQ: case Op::AttentionGradKV:
    case Op::LayerNorm: case Op::LayerNormGradInput: case Op::LayerNormGradParams:
    case Op::Softmax: case Op::SoftmaxGrad:
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

int FusionPlan::kernel_root(int node) const {
  while (host[node] >= 0) node = host[node];
  return node;
}

namespace {

class Planner {
 public:
  Planner(const Graph& g, FusionLimits limits) : g_(g), limits_(limits) {}
  FusionPlan run(const std::vector<int>& fetches, const std::vector<int>& update_ops);

 private:
  void mark_needed(const std::vector<int>& roots);
  void decide_buffers(const std::vector<int>& fetches);
  std::vector<bool> recomputed(const std::vector<int>& fetches, const std::vector<bool>& reads_nothing) const;
  void choose_hosts();
  void merge_sibling_reductions();
  void host_maps_beside_reductions();
  bool inlines(int n, int target) const;
  bool sibling_reads_ok(int r2, int r1) const { return reads_ready({g_.node(r2).inputs[0]}, r1); }
  bool reads_ready(std::vector<int> stack, int r1) const;
  void choose_in_place(const std::vector<int>& update_ops);
  void choose_recompute_sources();
  bool cheap(const Node& x) const;
  bool same_size(int a, int b) const {
    const Shape& x = g_.node(a).shape;
    const Shape& y = g_.node(b).shape;
    return x.elements(1) == y.elements(1) && x.elements(2) == y.elements(2);
  }
  void scatter_in_place(int update, const std::vector<int>& pos);
  bool elementwise(int id) const;
  // Distinct nodes that read `n`: a + a reads a twice but inlines it into one kernel.
  int readers(int n) const {
    std::vector<int> c = consumers_[n];
    std::sort(c.begin(), c.end());
    return static_cast<int>(std::unique(c.begin(), c.end()) - c.begin());
  }

  const Graph& g_;
  FusionLimits limits_;
  // Given a buffer by a fusion limit: its kernel ends there, so it never rides along in its
  // consumer's kernel (multi-output fusion would put the body back).
  std::vector<bool> limited_;
  // Sethi-Ullman register need of n's body given its operands' needs (a buffered operand is a
  // load: 1).
  int registers(int n, const std::vector<int>& regs) const {
    std::vector<int> need;
    for (int in : g_.node(n).inputs) need.push_back(p_.buffered[in] || p_.folded[in] ? 1 : regs[in]);
    std::sort(need.rbegin(), need.rend());
    int most = 1;
    for (size_t i = 0; i < need.size(); ++i) most = std::max(most, need[i] + static_cast<int>(i));
    return most;
  }
  FusionPlan p_;
  std::vector<int> uses_;
  std::vector<std::vector<int>> consumers_;
};

FusionPlan Planner::run(const std::vector<int>& fetches, const std::vector<int>& update_ops) {
  std::vector<int> roots = fetches;
  roots.insert(roots.end(), update_ops.begin(), update_ops.end());
  mark_needed(roots);
  decide_buffers(fetches);
  // A reshape that needs a buffer of a node that has one is a view of it, never a copy.
  p_.view.assign(g_.size(), false);
  for (int n = 0; n < g_.size(); ++n)
    p_.view[n] = p_.needed[n] && g_.node(n).op == Op::Reshape && p_.buffered[n] &&
                 p_.buffered[g_.node(n).inputs[0]];
  p_.host.assign(g_.size(), -1);
  merge_sibling_reductions();
  choose_hosts();
  // Hosting the elementwise nodes may have moved something a merged reduction reads after its
  // kernel; such a reduction gets its own kernel back, and hosting is decided again.
  for (bool changed = true; changed;) {
    changed = false;
    for (int n = 0; n < g_.size(); ++n)
      if (p_.host[n] >= 0 && op_kind(g_.node(n).op) == OpKind::Reduce && !sibling_reads_ok(n, p_.host[n]))
        p_.host[n] = -1, changed = true;
    if (changed) choose_hosts();
  }
  choose_in_place(update_ops);
  choose_recompute_sources();
  return std::move(p_);
}

void Planner::mark_needed(const std::vector<int>& roots) {
  p_.needed.assign(g_.size(), false);
  uses_.assign(g_.size(), 0);
  consumers_.assign(g_.size(), {});
  std::vector<int> stack = roots;
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (p_.needed[n]) continue;
    p_.needed[n] = true;
    // A count reads only its input's shape, so the input need not be computed.
    if (g_.node(n).op == Op::Count) continue;
    for (int in : g_.node(n).inputs) stack.push_back(in);
  }
  for (int n = 0; n < g_.size(); ++n)
    if (p_.needed[n] && g_.node(n).op != Op::Count)
      for (int in : g_.node(n).inputs) uses_[in]++, consumers_[in].push_back(n);
}

// Consumers decide for their producers, so walk from the last node back; then a forward walk
// gives a buffer to any producer whose inlined body would outgrow the fusion limit.
void Planner::decide_buffers(const std::vector<int>& fetches) {
  p_.buffered.assign(g_.size(), false);
  p_.folded.assign(g_.size(), false);
  for (int f : fetches) p_.buffered[f] = true;
  // A value that reads no memory (constants, counts of the batch, arithmetic and broadcasts of
  // them: a mean's gradient 1/B) costs nothing to recompute, so every reader inlines it. So do
  // random numbers: a draw is a function of the seed, the step and the element's index alone
  // (Philox, dsl/ops.h), so a dropout mask drawn again by the forward's product and by the
  // backward's is the same mask, without a kernel storing it and two loading it.
  std::vector<bool> reads_nothing(g_.size(), false);
  for (int n = 0; n < g_.size(); ++n) {
    const Node& node = g_.node(n);
    const OpKind kind = op_kind(node.op);
    const bool inlinable = kind == OpKind::Unary || kind == OpKind::Binary || node.op == Op::Select ||
                           node.op == Op::BroadcastTo || inline_reshape(g_, node);
    reads_nothing[n] = node.op == Op::Constant || node.op == Op::Count || node.op == Op::Iota ||
                       node.op == Op::RandomUniform ||
              (inlinable && std::all_of(node.inputs.begin(), node.inputs.end(), [&](int in) { return reads_nothing[in]; }));
  }
  const std::vector<bool> recompute = recomputed(fetches, reads_nothing);
  for (int n = g_.size() - 1; n >= 0; --n) {
    if (!p_.needed[n]) continue;
    const Node& node = g_.node(n);
    const OpKind kind = op_kind(node.op);
    const bool moves = node.op == Op::Reshape && !inline_reshape(g_, node);
    if (node.op == Op::Input || node.op == Op::Variable || kind == OpKind::Reduce || moves ||
        is_library(node.op))
      p_.buffered[n] = true;
    if ((kind == OpKind::Unary || kind == OpKind::Binary || kind == OpKind::Layout ||
         node.op == Op::Select) && readers(n) > 1 && !reads_nothing[n] && !recompute[n])
      p_.buffered[n] = true;
    if (node.op == Op::Assign) p_.buffered[node.inputs[1]] = true;
    if (moves || (is_library(node.op) && node.op != Op::MatMul))
      for (int in : node.inputs) p_.buffered[in] = true;
    if (node.op == Op::MatMul) {
      for (int in : node.inputs) {
        const Node& t = g_.node(in);
        if (swaps_last_two(t) && uses_[in] == 1 && !p_.buffered[in]) {
          p_.folded[in] = true;
          p_.buffered[t.inputs[0]] = true;
        } else {
          p_.buffered[in] = true;
        }
      }
    }
  }
  std::vector<int> size(g_.size(), 1), depth(g_.size(), 1), regs(g_.size(), 1);
  limited_.assign(g_.size(), false);
  std::vector<std::set<int>> reads(g_.size());  // the buffers an inlined node's body loads
  auto reads_of = [&](int n) {
    std::set<int> r;
    for (int in : g_.node(n).inputs) {
      if (p_.buffered[in] || p_.folded[in]) r.insert(in);
      else r.insert(reads[in].begin(), reads[in].end());
    }
    return r;
  };
  for (int n = 0; n < g_.size(); ++n) {
    if (!p_.needed[n]) continue;
    reads[n] = reads_of(n);
    // Too many buffers: the inlined inputs that load the most get buffers of their own (each
    // input alone is within the limit, so this ends with at most one read per input).
    while (static_cast<int>(reads[n].size()) > limits_.max_reads) {
      int widest = -1;
      for (int in : g_.node(n).inputs)
        if (!p_.buffered[in] && !p_.folded[in] && (widest < 0 || reads[in].size() > reads[widest].size()))
          widest = in;
      if (widest < 0) break;
      p_.buffered[widest] = true, limited_[widest] = true, size[widest] = 1, depth[widest] = 1;
      reads[n] = reads_of(n);
    }
    // Too much register pressure: the inlined input that needs the most gets a buffer.
    while (registers(n, regs) > limits_.max_registers) {
      int neediest = -1;
      for (int in : g_.node(n).inputs)
        if (!p_.buffered[in] && !p_.folded[in] && (neediest < 0 || regs[in] > regs[neediest])) neediest = in;
      if (neediest < 0) break;
      p_.buffered[neediest] = true, limited_[neediest] = true, size[neediest] = 1, depth[neediest] = 1;
    }
    regs[n] = registers(n, regs);
    for (int in : g_.node(n).inputs)
      if (!p_.buffered[in]) size[n] += size[in], depth[n] = std::max(depth[n], depth[in] + 1);
    const bool too_big = size[n] > limits_.max_exprs || depth[n] > limits_.max_depth;
    if (too_big && !p_.buffered[n] && !p_.folded[n] && g_.node(n).op != Op::Assign)
      p_.buffered[n] = true, limited_[n] = true, size[n] = 1, depth[n] = 1;
  }
}

// Arithmetic cheap enough to repeat in every reader: a few operations a point, no
// transcendental, no random numbers; slices are a load each at an offset.
bool Planner::cheap(const Node& x) const {
  switch (x.op) {
    case Op::Neg: case Op::Abs: case Op::Sign: case Op::Relu: case Op::Cast: case Op::StopGradient:
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Max: case Op::Min:
    case Op::Less: case Op::LessEqual: case Op::Greater: case Op::GreaterEqual: case Op::Equal:
    case Op::NotEqual: case Op::Select: case Op::BroadcastTo: case Op::Slice:
      return true;
    default:
      return inline_reshape(g_, x);
  }
}

// Elementwise values with several readers that every reader recomputes instead of one kernel
// storing them, because that moves fewer bytes: a value whose inlined body loads f buffers of
// its own size (plus smaller ones: per-channel statistics, broadcasts) and has r readers costs
// r*f full-size reads recomputed, against f reads + 1 write + r reads stored. Batch norm's
// centred input x - mean (f = 1) and gamma * (x - mean) are read again by the variance, the
// normalisation and the backward's sums: recomputed, they cost one read of x each, where storing
// them cost a pass of their own and a write. Only cheap arithmetic is recomputed (no
// transcendental, no random numbers), so the work added is a few operations a point, and slices,
// a load each at an offset: batch norm's shift, each channel's first element of x (f = 0: no
// buffer of its own size), is read where its readers need it, not stored by a kernel. Whether
// an input will have a buffer is predicted in node order from the rules of decide_buffers; a
// wrong guess costs bytes, never correctness.
std::vector<bool> Planner::recomputed(const std::vector<int>& fetches, const std::vector<bool>& reads_nothing) const {
  const int size = g_.size();
  std::vector<bool> forced(size, false);  // has a buffer whatever this decides
  for (int f : fetches) forced[f] = true;
  for (int n = 0; n < size; ++n) {
    if (!p_.needed[n]) continue;
    const Node& node = g_.node(n);
    const bool moves = node.op == Op::Reshape && !inline_reshape(g_, node);
    if (node.op == Op::Input || node.op == Op::Variable || op_kind(node.op) == OpKind::Reduce || moves ||
        is_library(node.op))
      forced[n] = true;
    if (node.op == Op::Assign) forced[node.inputs[1]] = true;
    if (moves || is_library(node.op))
      for (int in : node.inputs) {
        forced[in] = true;
        if (node.op == Op::MatMul && swaps_last_two(g_.node(in))) forced[g_.node(in).inputs[0]] = true;
      }
  }
  std::vector<bool> recompute(size, false), stored(size, false), valid(size, false);
  std::vector<std::set<int>> full(size);  // buffers of the node's own size its body loads
  for (int n = 0; n < size; ++n) {
    if (!p_.needed[n]) continue;
    const Node& node = g_.node(n);
    valid[n] = !forced[n] && cheap(node);
    for (int in : node.inputs) {
      if (!valid[n]) break;
      if (stored[in]) {
        if (same_size(in, n)) full[n].insert(in);
      } else if (reads_nothing[in]) {
      } else if (valid[in]) {
        if (same_size(in, n)) full[n].insert(full[in].begin(), full[in].end());
      } else {
        valid[n] = false;
      }
    }
    const int r = readers(n), f = static_cast<int>(full[n].size());
    recompute[n] = valid[n] && r > 1 && !reads_nothing[n] && r * f <= f + 1 + r;
    stored[n] = forced[n] || (r > 1 && !reads_nothing[n] && !recompute[n]);
    if (stored[n]) valid[n] = false;
  }
  return recompute;
}

// Stored values that a loop kernel reading them may compute again rather than load
// (FusionPlan::recompute_source). Such a value has a buffer because a library routine reads it
// (batch norm's ReLU output: the next convolution's input) or its own kernel stores it, and its
// body is cheap arithmetic over one buffer of its own size and smaller ones: the convolution's
// output x and per-channel statistics. A kernel that loads x anyway, as the backward's sums and
// normalisation do beside the ReLU's mask, then reads one full-size buffer less (the lowering
// decides, kernel by kernel). The value computed again is the same expression over the same
// buffers: where the body loads a variable an update writes in place (batch norm's gamma and
// beta, in a step that applies its optimiser), only kernels that run before that update
// recompute it. Its bits can differ from the stored value's only where the code generator
// contracts a multiply-add into an FMA in one kernel and not the other: within the error bound,
// and for a ReLU's mask only at a pre-activation within a rounding of zero, where the
// subgradient is either. Left alone: bodies that load more than one full-size buffer, or more
// than kMaxBody nodes (the reader's registers).
void Planner::choose_recompute_sources() {
  constexpr int kMaxBody = 24;
  p_.recompute_source.assign(g_.size(), -1);
  p_.recompute_before.assign(g_.size(), g_.size());
  std::vector<int> written_at(g_.size(), g_.size());  // a variable: where an update writes it in place
  for (int v = 0; v < g_.size(); ++v)
    if (p_.in_place[v] >= 0) written_at[p_.in_place[v]] = std::min(written_at[p_.in_place[v]], p_.kernel_root(v));
  for (int n = 0; n < g_.size(); ++n) {
    const Node& node = g_.node(n);
    if (!p_.needed[n] || !p_.buffered[n] || p_.view[n] || p_.folded[n] || !cheap(node) || node.op == Op::Slice ||
        node.op == Op::BroadcastTo || inline_reshape(g_, node))
      continue;
    const int root = p_.kernel_root(n);
    const bool loop_reader = std::any_of(consumers_[n].begin(), consumers_[n].end(), [&](int c) {
      return !is_library(g_.node(c).op) && g_.node(c).op != Op::Assign && p_.kernel_root(c) != root;
    });
    if (!loop_reader) continue;
    std::set<int> full, seen;
    std::vector<int> stack = node.inputs;
    bool ok = true;
    int body = 1, before = g_.size();
    while (ok && !stack.empty()) {
      const int m = stack.back();
      stack.pop_back();
      if (!seen.insert(m).second) continue;
      const Node& in = g_.node(m);
      if (p_.buffered[m] || p_.folded[m]) {
        int at = m;  // a view reads the buffer it views
        while (p_.view[at]) at = g_.node(at).inputs[0];
        ok = !p_.folded[m];
        before = std::min(before, written_at[at]);
        if (same_size(m, n)) full.insert(at);
        continue;
      }
      ok = (cheap(in) || in.op == Op::Constant || in.op == Op::Count || in.op == Op::Iota) && ++body <= kMaxBody;
      if (in.op != Op::Count) stack.insert(stack.end(), in.inputs.begin(), in.inputs.end());
    }
    if (ok && full.size() == 1) p_.recompute_source[n] = *full.begin(), p_.recompute_before[n] = before;
  }
}

// Multi-output fusion: an elementwise node with a buffer of its own (it has several consumers)
// is computed inside the kernel of its first consumer, which stores it on the side, when that
// consumer loops over the same space and reads it directly: dense+bias is stored by the ReLU
// kernel, the ReLU-gradient mask by the bias-gradient sum, and so on. Later consumers read the
// buffer as before; steps run in node order, so they come after.
bool Planner::elementwise(int id) const {
  const Node& x = g_.node(id);
  if (p_.view[id]) return false;
  const OpKind k = op_kind(x.op);
  return k == OpKind::Unary || k == OpKind::Binary || x.op == Op::Select ||
         x.op == Op::BroadcastTo || x.op == Op::Transpose || x.op == Op::Slice ||
         x.op == Op::Constant || x.op == Op::Iota || x.op == Op::RandomUniform || inline_reshape(g_, x);
}

void Planner::choose_hosts() {
  for (int n = 0; n < g_.size(); ++n)
    if (op_kind(g_.node(n).op) != OpKind::Reduce) p_.host[n] = -1;  // keep the merged reductions
  // From the last node back, so a consumer's own host is known: the kernel that computes the
  // node runs at its root's position, and every other consumer must run after that.
  for (int n = g_.size() - 1; n >= 0; --n) {
    const Node& p = g_.node(n);
    if (!p_.needed[n] || !p_.buffered[n] || p_.folded[n] || limited_[n] || consumers_[n].empty() ||
        !elementwise(n))
      continue;
    const int c = consumers_[n].front();
    if (!p_.buffered[c]) continue;
    const Node& consumer = g_.node(c);
    const bool same_space = op_kind(consumer.op) == OpKind::Reduce
                                ? consumer.inputs[0] == n
                                : elementwise(c) && consumer.shape == p.shape &&
                                      consumer.op != Op::Transpose && consumer.op != Op::Slice &&
                                      consumer.op != Op::Reshape && consumer.op != Op::BroadcastTo;
    const int root = p_.kernel_root(c);
    const bool later = std::all_of(consumers_[n].begin(), consumers_[n].end(),
                                   [&](int other) { return other == c || p_.kernel_root(other) > root; });
    if (same_space && later) p_.host[n] = c;
  }
  host_maps_beside_reductions();
}

// An elementwise value stored for other kernels, whose body computes a reduction's input too
// (inlined in both, never stored), is computed in the reduction's kernel as well: the ReLU
// gradient rounded to bf16 for the convolution's gradients beside the bias gradient's sum of
// it, one pass over the ReLU's and the pool gradient's values instead of two (in f32 the same
// value is the reduction's input itself, which the rule above stores on the side). The
// reduction's kernel runs at the reduction's place: everything the value reads must be ready
// by then, and its readers come after.
void Planner::host_maps_beside_reductions() {
  for (int r = 0; r < g_.size(); ++r) {
    const Node& sum = g_.node(r);
    if (!p_.needed[r] || op_kind(sum.op) != OpKind::Reduce || p_.host[r] >= 0) continue;
    const int input = sum.inputs[0];
    if (p_.buffered[input]) continue;  // stored already: the reduction loads it
    for (int n = 0; n < g_.size(); ++n) {
      const Node& map = g_.node(n);
      if (!p_.needed[n] || !p_.buffered[n] || p_.folded[n] || p_.view[n] || limited_[n] || p_.host[n] >= 0 ||
          !elementwise(n) || map.shape != g_.node(input).shape || consumers_[n].empty() || !inlines(n, input))
        continue;
      const bool hosts_others = std::any_of(p_.host.begin(), p_.host.end(), [&](int h) { return h == n; });
      const bool readers_later = std::all_of(consumers_[n].begin(), consumers_[n].end(),
                                             [&](int c) { return p_.kernel_root(c) > r; });
      if (!hosts_others && readers_later && reads_ready(map.inputs, r)) p_.host[n] = r;
    }
  }
}

// Whether n's body, inlined through unbuffered nodes, computes `target` (each node of the body
// visited once: bodies share subexpressions).
bool Planner::inlines(int n, int target) const {
  std::vector<int> stack{n};
  std::set<int> seen;
  while (!stack.empty()) {
    const int m = stack.back();
    stack.pop_back();
    for (int in : g_.node(m).inputs) {
      if (in == target) return true;
      if (!p_.buffered[in] && !p_.folded[in] && seen.insert(in).second) stack.push_back(in);
    }
  }
  return false;
}

// Sibling reductions: a reduction over the same loop space and axes as an earlier one that is a
// kernel of its own rides along in that kernel (its host), when everything it reads is ready by
// then: a cross-entropy's label term sum(p * x) joins the log-sum-exp of x, so both read the
// logits once. The reductions share the loop nest; each keeps its own accumulator.
void Planner::merge_sibling_reductions() {
  for (int r2 = 0; r2 < g_.size(); ++r2) {
    const Node& b = g_.node(r2);
    if (!p_.needed[r2] || op_kind(b.op) != OpKind::Reduce) continue;
    for (int r1 = r2 - 1; r1 >= 0; --r1) {
      const Node& a = g_.node(r1);
      if (!p_.needed[r1] || op_kind(a.op) != OpKind::Reduce || p_.host[r1] >= 0) continue;
      if (a.attrs.axes != b.attrs.axes || g_.node(a.inputs[0]).shape != g_.node(b.inputs[0]).shape)
        continue;
      if (sibling_reads_ok(r2, r1)) {
        p_.host[r2] = r1;
        break;
      }
    }
  }
}

// Whether the values on `stack` (a sibling reduction's input, or the operands of a value hosted
// beside a reduction), computed in r1's kernel (which runs at r1's place in node order), find
// every buffer they read written by then: each is an input or variable, computed by a step
// before r1, or computed in r1's kernel itself from such buffers, never r1's own result.
bool Planner::reads_ready(std::vector<int> stack, int r1) const {
  std::vector<bool> seen(g_.size(), false);
  while (!stack.empty()) {
    int m = stack.back();
    stack.pop_back();
    if (seen[m]) continue;
    seen[m] = true;
    const Node& n = g_.node(m);
    if (m == r1) return false;
    if (n.op == Op::Input || n.op == Op::Variable) continue;
    if (p_.view[m]) {  // read through the view: its elements must all be written already
      int at = m;
      while (p_.view[at]) at = g_.node(at).inputs[0];
      const Node& src = g_.node(at);
      if (src.op == Op::Input || src.op == Op::Variable || p_.kernel_root(at) < r1) continue;
      return false;
    }
    if (p_.buffered[m] && !p_.folded[m]) {
      const int root = p_.kernel_root(m);
      if (root < r1) continue;
      // Another reduction of r1's kernel is complete only once the kernel ends.
      if (root != r1 || op_kind(n.op) == OpKind::Reduce) return false;
      // computed in r1's kernel as well: what it reads must be ready too
    }
    if (n.op == Op::Count) continue;  // reads only its input's shape
    for (int in : n.inputs) stack.push_back(in);
  }
  return true;
}

// An update op's value is written straight into its variable, instead of into a temporary
// copied over at the end, when nothing reads the variable's old value after the kernel that
// computes the value runs, and that kernel reads it only where it writes (checked by the
// lowering once the kernel is built). Optimiser applies then touch each weight once.
void Planner::choose_in_place(const std::vector<int>& update_ops) {
  p_.in_place.assign(g_.size(), -1);
  // Where each node is computed: its own step, its host's, or (inlined) its latest reader's.
  std::vector<int> pos(g_.size(), g_.size());
  for (int n = g_.size() - 1; n >= 0; --n) {
    if (!p_.needed[n]) continue;
    if (p_.buffered[n]) {
      pos[n] = p_.kernel_root(n);
      continue;
    }
    int latest = -1;
    for (int c : consumers_[n]) latest = std::max(latest, g_.node(c).op == Op::Assign ? g_.size() : pos[c]);
    pos[n] = latest < 0 ? n : latest;
  }
  std::vector<int> assigned(g_.size(), 0);
  for (int u : update_ops) assigned[g_.node(u).inputs[0]]++;
  for (int u : update_ops) {
    const int var = g_.node(u).inputs[0], value = g_.node(u).inputs[1];
    const Node& v = g_.node(value);
    if (v.op == Op::ScatterRows) {
      if (assigned[var] == 1) scatter_in_place(u, pos);
      continue;
    }
    const OpKind kind = op_kind(v.op);
    const bool loop_kernel = kind == OpKind::Unary || kind == OpKind::Binary || v.op == Op::Select;
    if (assigned[var] != 1 || !loop_kernel || v.shape != g_.node(var).shape || p_.in_place[value] >= 0)
      continue;
    const int at = pos[value];
    const bool old_read_before = std::all_of(consumers_[var].begin(), consumers_[var].end(), [&](int c) {
      return c == u || pos[c] < at || (pos[c] == at && g_.node(c).shape == v.shape);
    });
    // The value's other readers must see the new value: they run after it anyway.
    if (old_read_before) p_.in_place[value] = var;
  }
}

// A sparse apply's scatter_rows (dsl/optimizers_sparse.cpp) writes the rows into its variable
// in place when the table it starts from is the variable itself, or a loop kernel of the
// variable's shape (momentum's decayed slot) that can itself be written in place: then no
// table-sized temporary exists. The variable's old value must be read before the first of
// these writes, and the base kernel's own value before the scatter changes it.
void Planner::scatter_in_place(int update, const std::vector<int>& pos) {
  const int var = g_.node(update).inputs[0], value = g_.node(update).inputs[1];
  const int base = g_.node(value).inputs[0];
  const Node& b = g_.node(base);
  const bool loop_kernel = op_kind(b.op) == OpKind::Unary || op_kind(b.op) == OpKind::Binary;
  const bool chained = base != var && loop_kernel && p_.buffered[base] && p_.host[base] < 0 &&
                       p_.in_place[base] < 0 && b.shape == g_.node(var).shape;
  if (base != var && !chained) return;
  const int first = chained ? pos[base] : pos[value];
  const bool old_read_before = std::all_of(consumers_[var].begin(), consumers_[var].end(), [&](int c) {
    return c == update || c == value || pos[c] < first || (chained && c == base);
  });
  const bool base_read_before = !chained || std::all_of(consumers_[base].begin(), consumers_[base].end(), [&](int c) {
    return c == value || pos[c] < pos[value];
  });
  if (!old_read_before || !base_read_before) return;
  if (chained) p_.in_place[base] = var;
  p_.in_place[value] = var;
}

}  // namespace

FusionPlan plan_fusion(const Graph& graph, const std::vector<int>& fetches,
                       const std::vector<int>& update_ops, FusionLimits limits) {
  return Planner(graph, limits).run(fetches, update_ops);
}

}  // namespace towerjit
