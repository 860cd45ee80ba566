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
    const std::vector<int> written = c.written();
    return std::any_of(written.begin(), written.end(), same) ||
           (!writes_only && std::any_of(c.inputs.begin(), c.inputs.end(), same));
  }
  return same(p.copies[step.index].to) || (!writes_only && same(p.copies[step.index].from));
}

bool touched_between(const Program& p, int b, int from, int to, bool writes_only) {
  for (int s = from + 1; s <= to; ++s)
    if (touches(p, p.steps[s], b, writes_only)) return true;
  return false;
}

Uses uses_of(const Program& p) {
  Uses u;
  u.writers.resize(p.buffers.size());
  u.readers.resize(p.buffers.size());
  auto note = [](std::vector<int>& v, int s) {
    if (v.empty() || v.back() != s) v.push_back(s);
  };
  for (int s = 0; s < static_cast<int>(p.steps.size()); ++s) {
    const Step& step = p.steps[s];
    if (step.kind == Step::Kind::kernel) {
      for (const Kernel* body : p.kernels[step.index].bodies()) {
        for (const Expr& e : body->exprs)
          if (e.kind == Expr::Kind::load) note(u.readers[body->accesses[e.access].buffer], s);
        for (const auto& o : body->outputs) note(u.writers[body->accesses[o.access].buffer], s);
      }
    } else if (step.kind == Step::Kind::library) {
      const LibraryCall& c = p.calls[step.index];
      for (int b : c.inputs) note(u.readers[b], s);
      for (int b : c.written()) note(u.writers[b], s);
    } else {
      note(u.readers[p.copies[step.index].from], s);
      note(u.writers[p.copies[step.index].to], s);
    }
  }
  return u;
}

}  // namespace towerjit::kir
