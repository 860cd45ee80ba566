// iota, the masks built on it, and gather. iota is a leaf the kernels compute from their loop
// indices (it reads no memory), so a mask built from two of them and a comparison fuses into
// whatever reads it.
#include <algorithm>
#include <sstream>

#include "dsl/index_errors.h"
#include "dsl/ops_internal.h"
#include "dsl/sequence.h"

namespace towerjit {

using namespace detail;

namespace detail {

// The name of the input whose values `id` carries unchanged (through layout ops and casts),
// for the out-of-range message; "" when the indices are computed.
std::string source_input(const Graph& g, int id) {
  for (;;) {
    const Node& n = g.node(id);
    if (n.op == Op::Input) return n.attrs.name;
    const bool passes = op_kind(n.op) == OpKind::Layout || n.op == Op::Cast || n.op == Op::StopGradient;
    if (!passes || n.inputs.size() != 1) return "";
    id = n.inputs[0];
  }
}

}  // namespace detail

Tensor iota(Shape shape, int axis, DType dtype, Loc loc) {
  Graph& g = Graph::current();
  for (int64_t d : shape.dims())
    user_check(d == kBatch || d > 0, loc)
        << "iota: dimension " << d << " in " << shape.str() << in_scope(g) << " must be positive or kBatch";
  const auto a = normalize_axis(axis, shape.rank());
  user_check(a.has_value() && shape.rank() > 0, loc)
      << "iota: axis " << axis << " is out of range for shape " << shape.str() << in_scope(g)
      << "; the values count along one of its axes (0 to " << shape.rank() - 1 << ", or negative from the end)";
  Attrs attrs;
  attrs.axis = *a;
  return make(g, Op::Iota, {}, std::move(shape), dtype, attrs, loc);
}

Tensor arange(int64_t n, DType dtype, Loc loc) { return iota(Shape{n}, 0, dtype, loc); }

Tensor causal_mask(int64_t t, Loc loc) {
  user_check(t > 0, loc) << "causal_mask: the sequence length " << t << in_scope(Graph::current())
                         << " must be positive";
  // f32 indices compare exactly below 2^24; the comparison gives 1 or 0 in f32.
  return less_equal(iota({t, t}, 1, DType::f32, loc), iota({t, t}, 0, DType::f32, loc), loc);
}

Tensor tril(Tensor x, Loc loc) {
  Operand o(x, loc);
  Graph& g = graph_of({&o}, "tril", loc);
  user_check(x.rank() >= 2, loc) << "tril: expects a matrix or a batch of them but got " << x.describe()
                                 << in_scope(g) << "; tril keeps the lower triangle of the last two axes";
  const int64_t rows = x.shape()[x.rank() - 2], cols = x.shape()[x.rank() - 1];
  user_check(rows != kBatch && cols != kBatch, loc)
      << "tril: the last two axes of " << x.describe() << in_scope(g)
      << " hold the batch dimension B; the triangle needs fixed sizes";
  GraphScope use(g);
  Tensor keep = less_equal(iota({rows, cols}, 1, x.dtype(), loc), iota({rows, cols}, 0, x.dtype(), loc), loc);
  return mul(x, keep, loc);
}

Tensor gather(Tensor table, Tensor indices, int axis, Loc loc) {
  return gather(table, indices, axis, /*sparse=*/true, loc);
}

Tensor gather(Tensor table, Tensor indices, int axis, bool sparse, Loc loc) {
  Operand ot(table, loc), oi(indices, loc);
  Graph& g = graph_of({&ot, &oi}, "gather", loc);
  user_check(indices.dtype() == DType::i32, loc)
      << "gather: expects i32 indices but got " << indices.describe() << in_scope(g)
      << "; declare the input DType::i32 or convert with cast(x, DType::i32)";
  user_check(table.rank() >= 1, loc) << "gather: the table " << table.describe() << in_scope(g)
                                     << " is a scalar; gather takes slices of an axis";
  const int a = one_axis(axis, table, "gather", loc);
  user_check(table.shape()[a] != kBatch, loc)
      << "gather: axis " << a << " of the table " << table.describe() << in_scope(g)
      << " is the batch dimension B; the gathered axis needs a fixed size (the number of rows)";
  std::vector<int64_t> dims(table.shape().dims().begin(), table.shape().dims().begin() + a);
  dims.insert(dims.end(), indices.shape().dims().begin(), indices.shape().dims().end());
  dims.insert(dims.end(), table.shape().dims().begin() + a + 1, table.shape().dims().end());
  Attrs attrs;
  attrs.axis = a;
  attrs.name = source_input(g, indices.id());
  attrs.dense_gradient = !sparse;
  return make(g, Op::Gather, {table.id(), indices.id()}, Shape(std::move(dims)), table.dtype(), attrs, loc);
}

}  // namespace towerjit
