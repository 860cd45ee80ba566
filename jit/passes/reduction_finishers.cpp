#include "jit/passes/reduction_finishers.h"

#include <algorithm>
#include <set>

#include "jit/kir/drop_steps.h"
#include "jit/kir/views.h"

namespace towerjit {
namespace {

using kir::Affine;

std::vector<int> kept_axes(const kir::Kernel& k) {
  std::vector<int> kept;
  for (int a = 0; a < k.space.rank(); ++a)
    if (std::find(k.reduce_axes.begin(), k.reduce_axes.end(), a) == k.reduce_axes.end()) kept.push_back(a);
  return kept;
}

// The extents of `axes` of `space` but those of 1: two loops over the same points in the same
// order have the same list.
std::vector<int64_t> extents(const Shape& space, const std::vector<int>& axes) {
  std::vector<int64_t> e;
  for (int a : axes)
    if (space[a] != 1) e.push_back(space[a]);
  return e;
}

// Whether `a` addresses element i of its buffer at the point whose row-major index over `axes`
// is i (the other axes' strides 0): a reduction's result at output i, or a load of it at point i.
bool addresses_flat_index(const kir::Access& a, const Shape& space, const std::vector<int>& axes) {
  if (!(a.offset == Affine{})) return false;
  Affine stride{1, 0};
  for (int axis = space.rank() - 1; axis >= 0; --axis) {
    const bool ours = std::find(axes.begin(), axes.end(), axis) != axes.end();
    if (!ours) {
      if (!(a.strides[axis] == Affine{})) return false;
      continue;
    }
    if (space[axis] != 1 && !(a.strides[axis] == stride)) return false;
    stride = space[axis] == kBatch ? Affine{0, stride.c} : Affine{stride.c * space[axis], stride.b * space[axis]};
  }
  return true;
}

struct Effects {
  std::set<int> reads, writes;  // root buffers
};

Effects effects_of(const kir::Program& p, const kir::Kernel& k) {
  Effects e;
  for (const kir::Expr& x : k.exprs)
    if (x.kind == kir::Expr::Kind::load && k.accesses[x.access].buffer >= 0)
      e.reads.insert(kir::root_of(p, k.accesses[x.access].buffer));
  for (const kir::Kernel::Output& o : k.outputs) e.writes.insert(kir::root_of(p, k.accesses[o.access].buffer));
  return e;
}

bool can_finish(const kir::Program& p, const kir::Kernel& r, const kir::Kernel& next) {
  if (r.reduce == Op::Constant || !r.parts.empty() || !r.finishers.empty()) return false;
  if (next.reduce != Op::Constant) return false;
  const std::vector<int> kept = kept_axes(r);
  const Affine points = kir::points_of(Shape(extents(r.space, kept)));
  if (points.b != 0 || points.c > kMaxFinisherPoints) return false;
  // Each result buffer, where its store addresses the output's flat index.
  std::set<int> results;
  for (int j = 0; j < r.reductions(); ++j) {
    const kir::Access& a = r.accesses[r.outputs[j].access];
    if (addresses_flat_index(a, r.space, kept)) results.insert(a.buffer);
  }
  const Effects reduction = effects_of(p, r);
  for (const kir::Kernel* body : next.bodies()) {
    std::vector<int> all(body->space.rank());
    for (int a = 0; a < body->space.rank(); ++a) all[a] = a;
    if (extents(body->space, all) != extents(r.space, kept)) return false;
    const Effects e = effects_of(p, *body);
    for (int b : e.writes)
      if (reduction.reads.count(b) || reduction.writes.count(b)) return false;
    for (const kir::Expr& x : body->exprs) {
      if (x.kind != kir::Expr::Kind::load) continue;
      const kir::Access& a = body->accesses[x.access];
      if (a.buffer < 0 || !reduction.writes.count(kir::root_of(p, a.buffer))) continue;
      if (!results.count(a.buffer) || !addresses_flat_index(a, body->space, all)) return false;
    }
  }
  return true;
}

}  // namespace

kir::Program attach_reduction_finishers(kir::Program p) {
  std::set<int> attached;  // steps now run as their reduction's finishers
  int last = -1;           // the last step not attached
  for (int s = 0; s < static_cast<int>(p.steps.size()); ++s) {
    const kir::Step& step = p.steps[s];
    if (step.kind == kir::Step::Kind::kernel && last >= 0 && p.steps[last].kind == kir::Step::Kind::kernel &&
        can_finish(p, p.kernels[p.steps[last].index], p.kernels[step.index])) {
      kir::Kernel& r = p.kernels[p.steps[last].index];
      kir::Kernel& next = p.kernels[step.index];
      // The finishers keep their graph nodes: the reduction's own stay what its points run (the
      // cost model's FLOPs, one an op a point: runtime/cost/recorded_step.h).
      if (next.parts.empty()) r.finishers.push_back(std::move(next));
      else for (kir::Kernel& part : next.parts) r.finishers.push_back(std::move(part));
      attached.insert(s);
      continue;
    }
    last = s;
  }
  return kir::drop_steps(std::move(p), attached);
}

}  // namespace towerjit
