#include "jit/passes/buffer_plan.h"

#include <algorithm>

#include "jit/kir/views.h"

namespace towerjit {
namespace {

// Every buffer a step touches, reads and writes alike.
std::vector<int> touched(const kir::Program& p, const kir::Step& s) {
  std::vector<int> ids;
  if (s.kind == kir::Step::Kind::kernel) {
    for (const kir::Kernel* k : p.kernels[s.index].bodies())  // a group: all its parts
      for (const auto& a : k->accesses)
        if (a.buffer >= 0) ids.push_back(a.buffer);
  } else if (s.kind == kir::Step::Kind::library) {
    const auto& c = p.calls[s.index];
    ids = c.inputs;
    for (int b : c.written()) ids.push_back(b);
  } else {
    ids = {p.copies[s.index].from, p.copies[s.index].to};
  }
  return ids;
}

}  // namespace

BufferPlan plan_buffers(const kir::Program& p, int64_t batch) {
  const int n = static_cast<int>(p.buffers.size()), steps = static_cast<int>(p.steps.size());
  std::vector<int> first(n, steps), last(n, -1);
  for (int s = 0; s < steps; ++s)
    for (int b : touched(p, p.steps[s])) {
      const int r = kir::root_of(p, b);
      first[r] = std::min(first[r], s);
      last[r] = std::max(last[r], s);
    }
  for (int f : p.fetches) last[kir::root_of(p, f)] = steps;

  std::vector<int> order;
  for (int b = 0; b < n; ++b)
    if (p.buffers[b].kind == kir::Buffer::Kind::temp && p.buffers[b].alias_of < 0 && last[b] >= 0)
      order.push_back(b);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return first[a] < first[b]; });

  BufferPlan plan;
  plan.offset.assign(n, -1);
  struct Placed { int64_t begin, end; int buffer; };
  std::vector<Placed> placed;
  for (int b : order) {
    // 64-byte aligned, so vector loads of any row start aligned when rows allow it.
    const int64_t size = (p.buffers[b].shape.elements(batch) * 4 + 63) / 64 * 64;
    std::vector<Placed> live;
    for (const Placed& q : placed)
      if (last[q.buffer] >= first[b] && first[q.buffer] <= last[b]) live.push_back(q);
    std::sort(live.begin(), live.end(), [](const Placed& x, const Placed& y) { return x.begin < y.begin; });
    int64_t offset = 0;  // the lowest gap that fits among the overlapping lifetimes
    for (const Placed& q : live) {
      if (q.begin - offset >= size) break;
      offset = std::max(offset, q.end);
    }
    plan.offset[b] = offset;
    placed.push_back({offset, offset + size, b});
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
  }
  return plan;
}

}  // namespace towerjit
