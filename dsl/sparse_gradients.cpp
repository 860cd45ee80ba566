// A sparse gradient is a GatherGrad node read through its inputs; see dsl/sparse_gradients.h.
#include "dsl/sparse_gradients.h"

#include <algorithm>

#include "dsl/ops_internal.h"
#include "dsl/sequence.h"

namespace towerjit {

std::optional<SparseGradient> as_sparse(const Tensor& grad) {
  if (!grad.valid()) return std::nullopt;
  const Node& n = grad.node();
  if (n.op != Op::GatherGrad || n.attrs.axis != 0 || n.attrs.dense_gradient) return std::nullopt;
  return SparseGradient{Tensor(&grad.graph(), n.inputs[0]), Tensor(&grad.graph(), n.inputs[1]), n.shape,
                        n.attrs.name};
}

namespace detail {

namespace {

// Two index tensors that concatenate along their last axis: equal leading axes, a last axis
// that is not the batch (concat needs fixed sizes).
bool concatenable(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank() || a.rank() == 0) return false;
  const int last = a.rank() - 1;
  if (a[last] == kBatch || b[last] == kBatch) return false;
  for (int d = 0; d < last; ++d)
    if (a[d] != b[d]) return false;
  return true;
}

}  // namespace

Tensor add_gradients(Tensor a, Tensor b, Loc loc) {
  const std::optional<SparseGradient> sa = as_sparse(a), sb = as_sparse(b);
  if (!sa || !sb || sa->dense_shape != sb->dense_shape ||
      !concatenable(sa->indices.shape(), sb->indices.shape()))
    return add(a, b, loc);
  const int axis = sa->indices.rank() - 1;
  Tensor indices = concat({sa->indices, sb->indices}, axis, loc);
  Tensor values = concat({sa->values, sb->values}, axis, loc);
  Attrs attrs = a.node().attrs;  // axis 0, the table's shape, the first gather's input name
  return make(a.graph(), Op::GatherGrad, {indices.id(), values.id()}, sa->dense_shape, DType::f32, attrs, loc);
}

Tensor sparse_gradient_like(const Tensor& like, Tensor indices, Tensor values, Loc loc) {
  const std::optional<SparseGradient> s = as_sparse(like);
  internal_check(s.has_value()) << "sparse_gradient_like of " << like.describe();
  return make(like.graph(), Op::GatherGrad, {indices.id(), values.id()}, s->dense_shape, DType::f32,
              like.node().attrs, loc);
}

Tensor combine_rows(const SparseGradient& g, Loc loc) {
  Attrs attrs;
  attrs.shape = g.dense_shape;
  attrs.name = g.source;
  return make(g.values.graph(), Op::CombineRows, {g.indices.id(), g.values.id()}, g.values.shape(),
              DType::f32, attrs, loc);
}

Tensor gather_rows(Tensor table, const SparseGradient& g, Loc loc) {
  return gather(table, g.indices, 0, /*sparse=*/true, loc);
}

Tensor scatter_rows(Tensor table, const SparseGradient& g, Tensor rows, Loc loc) {
  internal_check(table.shape() == g.dense_shape && rows.shape() == g.values.shape())
      << "scatter_rows of " << rows.describe() << " into " << table.describe();
  Attrs attrs;
  attrs.name = g.source;
  return make(table.graph(), Op::ScatterRows, {table.id(), g.indices.id(), rows.id()}, table.shape(),
              DType::f32, attrs, loc);
}

}  // namespace detail

}  // namespace towerjit
