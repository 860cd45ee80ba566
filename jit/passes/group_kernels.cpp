#include "jit/passes/group_kernels.h"

#include <algorithm>
#include <set>

#include "jit/kir/views.h"
#include "jit/passes/coalesce_axes.h"

namespace towerjit {
namespace {

using kir::Affine;

constexpr size_t kMaxMergedExprs = 256;  // as FusionLimits::max_exprs: bodies stay that small

// The (root) buffers a step reads and writes; two steps that share a buffer one of them
// writes must keep their order.
struct Effects {
  std::set<int> reads, writes;
  bool conflicts(const Effects& o) const {
    auto meets = [](const std::set<int>& a, const std::set<int>& b) {
      return std::any_of(a.begin(), a.end(), [&](int x) { return b.count(x) > 0; });
    };
    return meets(reads, o.writes) || meets(writes, o.reads) || meets(writes, o.writes);
  }
  void add(const Effects& o) {
    reads.insert(o.reads.begin(), o.reads.end());
    writes.insert(o.writes.begin(), o.writes.end());
  }
};

Effects effects_of(const kir::Program& p, const kir::Step& s) {
  Effects e;
  auto r = [&](int b) { e.reads.insert(kir::root_of(p, b)); };
  auto w = [&](int b) { e.writes.insert(kir::root_of(p, b)); };
  if (s.kind == kir::Step::Kind::kernel) {
    const kir::Kernel& k = p.kernels[s.index];
    for (const kir::Kernel* body : k.bodies()) {
      for (const auto& x : body->exprs)
        if (x.kind == kir::Expr::Kind::load) r(body->accesses[x.access].buffer);
      for (const auto& o : body->outputs) w(body->accesses[o.access].buffer);
    }
  } else if (s.kind == kir::Step::Kind::library) {
    for (int b : p.calls[s.index].inputs) r(b);
    for (int b : p.calls[s.index].written()) w(b);
  } else {
    r(p.copies[s.index].from);
    w(p.copies[s.index].to);
  }
  return e;
}

bool groupable(const kir::Program& p, const kir::Step& s) {
  if (s.kind != kir::Step::Kind::kernel) return false;
  const kir::Kernel& k = p.kernels[s.index];
  return k.parts.empty() && k.reduce == Op::Constant;
}

// Whether consumer `c` may be computed point by point together with its producer `pk` (which
// runs first): the same loop space, and every buffer one writes that the other touches is
// touched by both at one and the same access (the element of the point), never through a view.
// Only producers that write variables (update values, stored in place) are merged: their
// stores are needed anyway, where a temporary's would outlive its last reader for nothing, and
// the fusion plan has already decided how the rest of the step fuses.
bool same_points(const kir::Program& p, const kir::Kernel& pk, const kir::Kernel& c) {
  if (pk.space != c.space || pk.exprs.size() + c.exprs.size() > kMaxMergedExprs) return false;
  for (const auto& o : pk.outputs)
    if (p.buffers[pk.accesses[o.access].buffer].kind != kir::Buffer::Kind::variable) return false;
  auto fits = [&](const kir::Kernel& writer, const kir::Kernel& other) {
    for (const auto& o : writer.outputs) {
      const kir::Access& store = writer.accesses[o.access];
      const int root = kir::root_of(p, store.buffer);
      for (const auto& a : other.accesses)
        if (a.buffer >= 0 && kir::root_of(p, a.buffer) == root && !(a == store)) return false;
      for (const auto& o2 : other.outputs)
        if (kir::root_of(p, other.accesses[o2.access].buffer) == root) return false;  // both write it
    }
    return true;
  };
  return fits(pk, c) && fits(c, pk);
}

// The producer's body, then the consumer's reading the producer's values where it loaded them.
kir::Kernel merge(kir::Kernel pk, const kir::Kernel& c) {
  std::vector<int> access(c.accesses.size()), value(c.exprs.size());
  for (size_t i = 0; i < c.accesses.size(); ++i) {
    auto at = std::find(pk.accesses.begin(), pk.accesses.end(), c.accesses[i]);
    if (at == pk.accesses.end()) at = pk.accesses.insert(pk.accesses.end(), c.accesses[i]);
    access[i] = static_cast<int>(at - pk.accesses.begin());
  }
  const size_t produced = pk.outputs.size();
  for (size_t i = 0; i < c.exprs.size(); ++i) {
    kir::Expr e = c.exprs[i];
    if (e.access >= 0) e.access = access[e.access];
    if (e.kind == kir::Expr::Kind::load) {
      auto o = std::find_if(pk.outputs.begin(), pk.outputs.begin() + produced,
                            [&](const kir::Kernel::Output& out) { return out.access == e.access; });
      if (o != pk.outputs.begin() + produced) {  // the producer's value at this point
        value[i] = o->expr;
        continue;
      }
    }
    for (int& a : e.args) a = value[a];
    pk.exprs.push_back(e);
    value[i] = static_cast<int>(pk.exprs.size()) - 1;
  }
  for (const auto& o : c.outputs) pk.outputs.push_back({access[o.access], value[o.expr]});
  pk.nodes.insert(pk.nodes.end(), c.nodes.begin(), c.nodes.end());
  return pk;
}

// Vertical merging: an elementwise kernel that reads what an earlier one wrote into a variable,
// at the same points, joins that kernel, moving back over the steps between (when it depends
// on none of them) or bringing the producer forward over them (when the producer depends on
// none): an Adam update's weight kernel joins the kernels of its new moments, one per variable.
void merge_chains(kir::Program& p) {
  std::vector<kir::Step> out;
  std::vector<Effects> fx;  // of each step of `out`
  for (const kir::Step& s : p.steps) {
    kir::Step current = s;
    Effects e = effects_of(p, s);
    size_t pos = out.size();
    Effects between, blockers;  // the steps in (t, pos); those of them `current` depends on
    for (int t = static_cast<int>(pos) - 1; groupable(p, s) && t >= 0; --t) {
      const bool producer = fx[t].conflicts(e) && groupable(p, out[t]) &&
                            same_points(p, p.kernels[out[t].index], p.kernels[current.index]);
      if (producer && (blockers.reads.empty() && blockers.writes.empty())) {  // current moves back
        kir::Kernel& pk = p.kernels[out[t].index];
        pk = merge(std::move(pk), p.kernels[current.index]);
        p.kernels[current.index] = kir::Kernel{};  // merged away: no step runs it any more
        current = out[t];
        e.add(fx[t]);
        out.erase(out.begin() + t), fx.erase(fx.begin() + t);
        pos = t, between = {}, blockers = {};
      } else if (producer && !between.conflicts(fx[t])) {  // the producer moves forward
        kir::Kernel& c = p.kernels[current.index];
        c = merge(std::move(p.kernels[out[t].index]), c);
        p.kernels[out[t].index] = kir::Kernel{};
        e.add(fx[t]);
        out.erase(out.begin() + t), fx.erase(fx.begin() + t);
        --pos;
      } else {
        if (fx[t].conflicts(e)) blockers.add(fx[t]);
        between.add(fx[t]);
      }
    }
    out.insert(out.begin() + pos, current);
    fx.insert(fx.begin() + pos, e);
  }
  p.steps = std::move(out);
}

}  // namespace

kir::Program group_kernels(kir::Program p) {
  merge_chains(p);
  struct Placed {
    kir::Step step;
    Effects effects;
    std::vector<int> members;  // kernels of an open group; empty: not groupable
  };
  std::vector<Placed> placed;
  for (const kir::Step& s : p.steps) {
    Effects e = effects_of(p, s);
    const bool joins = groupable(p, s);
    int target = -1;
    for (int t = static_cast<int>(placed.size()) - 1; joins && t >= 0; --t) {
      if (placed[t].effects.conflicts(e)) break;
      if (!placed[t].members.empty() && placed[t].members.size() < kMaxGroupParts) target = t;
    }
    if (target >= 0) {
      placed[target].members.push_back(s.index);
      placed[target].effects.add(e);
    } else {
      placed.push_back({s, std::move(e), joins ? std::vector<int>{s.index} : std::vector<int>{}});
    }
  }
  std::vector<kir::Kernel> kernels;
  p.steps.clear();
  for (Placed& at : placed) {
    if (at.step.kind == kir::Step::Kind::kernel) {
      if (at.members.size() <= 1) {
        kernels.push_back(std::move(p.kernels[at.step.index]));
      } else {
        kir::Kernel group;
        const std::string& first = p.kernels[at.members[0]].name;
        group.name = first.substr(0, first.find('_')) + "_group";
        for (int m : at.members) {
          group.parts.push_back(coalesce_axes(std::move(p.kernels[m])));
          const auto& nodes = group.parts.back().nodes;
          group.nodes.insert(group.nodes.end(), nodes.begin(), nodes.end());
        }
        kernels.push_back(std::move(group));
      }
      at.step.index = static_cast<int>(kernels.size()) - 1;
    }
    p.steps.push_back(at.step);
  }
  p.kernels = std::move(kernels);
  return p;
}

}  // namespace towerjit
