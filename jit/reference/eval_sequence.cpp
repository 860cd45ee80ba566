// The sequence-model primitives: iota, gather and the gather's dense gradient, in double
// precision. A gather views the table as [outer, rows, inner] around its axis and the output
// as [outer, count, inner], count being the number of indices.
#include "dsl/error.h"
#include "dsl/index_errors.h"
#include "jit/reference/eval.h"

namespace towerjit::reference {

namespace {

struct GatherGeometry {
  int64_t outer = 1, rows = 0, inner = 1, count = 0;
};

GatherGeometry geometry(const Shape& table, int axis, int64_t count) {
  GatherGeometry g;
  for (int d = 0; d < axis; ++d) g.outer *= table[d];
  g.rows = table[axis];
  for (int d = axis + 1; d < table.rank(); ++d) g.inner *= table[d];
  g.count = count;
  return g;
}

// Every index a whole number in [0, rows), else the user's error naming the indices.
void check_indices(const Node& node, const Array& indices, int64_t rows) {
  for (int64_t i = 0; i < indices.size(); ++i) {
    const double v = indices[i];
    if (!(v >= 0 && v < static_cast<double>(rows)))
      throw detail::gather_out_of_range(node, static_cast<int64_t>(v), i, indices.shape, rows);
  }
}

}  // namespace

Array eval_iota(const EvalArgs& a) {
  Array out = a.result();
  const int axis = a.node.attrs.axis;
  int64_t inner = 1;
  for (int d = axis + 1; d < out.shape.rank(); ++d) inner *= out.shape[d];
  const int64_t n = out.shape.rank() == 0 ? 1 : out.shape[axis];
  for (int64_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>((i / inner) % n);
  return out;
}

Array eval_gather(const EvalArgs& a) {
  const Array &table = a.in(0), &indices = a.in(1);
  const GatherGeometry g = geometry(table.shape, a.node.attrs.axis, indices.size());
  check_indices(a.node, indices, g.rows);
  Array out = a.result();
  internal_check(out.size() == g.outer * g.count * g.inner) << "gather output " << out.shape.str();
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t i = 0; i < g.count; ++i) {
      const int64_t row = static_cast<int64_t>(indices[i]);
      for (int64_t in = 0; in < g.inner; ++in)
        out[(o * g.count + i) * g.inner + in] = table[(o * g.rows + row) * g.inner + in];
    }
  return out;
}

Array eval_gather_grad(const EvalArgs& a) {
  const Array &indices = a.in(0), &dy = a.in(1);
  Array out = a.result();  // zeros: rows no index names get no gradient
  const GatherGeometry g = geometry(out.shape, a.node.attrs.axis, indices.size());
  check_indices(a.node, indices, g.rows);
  internal_check(dy.size() == g.outer * g.count * g.inner) << "gather_grad of " << dy.shape.str();
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t i = 0; i < g.count; ++i) {
      const int64_t row = static_cast<int64_t>(indices[i]);
      for (int64_t in = 0; in < g.inner; ++in)
        out[(o * g.rows + row) * g.inner + in] += dy[(o * g.count + i) * g.inner + in];
    }
  return out;
}

}  // namespace towerjit::reference

namespace towerjit::reference {

// Rows of axis 0: the table [rows, inner...], the values [count, inner...].
Array eval_combine_rows(const EvalArgs& a) {
  const Array &indices = a.in(0), &values = a.in(1);
  const GatherGeometry g = geometry(a.node.attrs.shape, 0, indices.size());
  check_indices(a.node, indices, g.rows);
  std::vector<double> sums(g.rows * g.inner, 0.0);
  for (int64_t i = 0; i < g.count; ++i)
    for (int64_t in = 0; in < g.inner; ++in)
      sums[static_cast<int64_t>(indices[i]) * g.inner + in] += values[i * g.inner + in];
  Array out = a.result();
  for (int64_t i = 0; i < g.count; ++i)
    for (int64_t in = 0; in < g.inner; ++in)
      out[i * g.inner + in] = sums[static_cast<int64_t>(indices[i]) * g.inner + in];
  return out;
}

Array eval_scatter_rows(const EvalArgs& a) {
  const Array &table = a.in(0), &indices = a.in(1), &rows = a.in(2);
  const GatherGeometry g = geometry(table.shape, 0, indices.size());
  check_indices(a.node, indices, g.rows);
  Array out = table;
  for (int64_t i = 0; i < g.count; ++i)
    for (int64_t in = 0; in < g.inner; ++in)
      out[static_cast<int64_t>(indices[i]) * g.inner + in] = rows[i * g.inner + in];
  return out;
}

}  // namespace towerjit::reference
