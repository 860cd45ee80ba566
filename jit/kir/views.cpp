#include "jit/kir/views.h"

#include <algorithm>

namespace towerjit::kir {

int root_of(const Program& p, int b) {
  while (p.buffers[b].alias_of >= 0) b = p.buffers[b].alias_of;
  return b;
}

bool touches(const Program& p, const Step& step, int b, bool writes_only) {
  const int r = root_of(p, b);
  auto same = [&](int other) { return other >= 0 && root_of(p, other) == r; };
  if (step.kind == Step::Kind::kernel) {
    for (const Kernel* k : p.kernels[step.index].bodies()) {
      for (const auto& o : k->outputs)
        if (same(k->accesses[o.access].buffer)) return true;
      if (!writes_only)
        for (const Access& a : k->accesses)
          if (same(a.buffer)) return true;
    }
    return false;
  }
  if (step.kind == Step::Kind::library) {
    const LibraryCall& c = p.calls[step.index];
    return same(c.output) || (!writes_only && std::any_of(c.inputs.begin(), c.inputs.end(), same));
  }
  return same(p.copies[step.index].to) || (!writes_only && same(p.copies[step.index].from));
}

}  // namespace towerjit::kir
