// Layout ops: they move elements without arithmetic. The batch dimension B is symbolic, so
// every op here keeps it a whole dimension of its own: a program compiled once must run for
// any batch (a tower's uneven slice included), which rules out folding B into other axes.
#include <algorithm>
#include <numeric>
#include <sstream>

#include "dsl/ops_internal.h"

namespace towerjit {

using namespace detail;

namespace {

Graph& graph_of_one(const Tensor& x, const char* op, Loc loc) {
  Operand o(x, loc);
  return graph_of({&o}, op, loc);
}

template <typename T>
std::string list_str(const std::vector<T>& v) {
  std::ostringstream out;
  out << "{";
  for (size_t i = 0; i < v.size(); ++i) out << (i ? "," : "") << v[i];
  return out.str() + "}";
}

std::string dim_str(int64_t d) { return d == kBatch ? "B" : std::to_string(d); }

int count_batch(const Shape& s) {
  return static_cast<int>(std::count(s.dims().begin(), s.dims().end(), kBatch));
}


}  // namespace

Tensor reshape(Tensor x, Shape shape, Loc loc) {
  Graph& g = graph_of_one(x, "reshape", loc);
  for (int64_t d : shape.dims())
    user_check(d == kBatch || d > 0, loc) << "reshape: dimension " << d << " in " << shape.str()
                                          << in_scope(g) << " must be positive or kBatch";
  const int bx = count_batch(x.shape()), bt = count_batch(shape);
  user_check(bx == bt, loc)
      << "reshape: cannot reshape " << x.describe() << " to " << shape.str() << in_scope(g)
      << ": the batch dimension B must stay a dimension of its own (it appears " << bx
      << " time(s) in the input and " << bt << " in the target); "
      << (bx > bt ? "keep B in the target, e.g. [B,...] with the other dimensions multiplied"
                  : "remove B from the target, or reshape a tensor that has the batch");
  const int64_t nx = x.shape().static_elements(), nt = shape.static_elements();
  const char* per = bx ? " per example" : "";
  user_check(nx == nt, loc)
      << "reshape: cannot reshape " << x.describe() << " to " << shape.str() << in_scope(g)
      << ": element counts differ (" << nx << " vs " << nt << per << ")"
      << "; the target's dimensions must multiply to " << nx;
  return make(g, Op::Reshape, {x.id()}, std::move(shape), x.dtype(), {}, loc);
}

Tensor transpose(Tensor x, std::vector<int> perm, Loc loc) {
  Graph& g = graph_of_one(x, "transpose", loc);
  const int rank = x.rank();
  const std::vector<int> given = perm;  // the message shows what the user wrote
  if (perm.empty())
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  std::vector<bool> seen(rank, false);
  bool ok = static_cast<int>(perm.size()) == rank;
  for (int& p : perm) {
    auto a = normalize_axis(p, rank);
    ok = ok && a.has_value() && !seen[*a];
    if (!ok) break;
    seen[*a] = true;
    p = *a;
  }
  user_check(ok, loc) << "transpose: " << list_str(given) << " is not a permutation of the "
                      << rank << " axes of " << x.describe() << in_scope(g)
                      << "; list each axis 0.." << rank - 1
                      << " exactly once, or pass {} to reverse them";
  std::vector<int64_t> dims(rank);
  for (int i = 0; i < rank; ++i) dims[i] = x.shape()[perm[i]];
  Attrs attrs;
  attrs.axes = std::move(perm);
  return make(g, Op::Transpose, {x.id()}, Shape(std::move(dims)), x.dtype(), attrs, loc);
}

Tensor broadcast_to(Tensor x, Shape shape, Loc loc) {
  Graph& g = graph_of_one(x, "broadcast_to", loc);
  for (int64_t d : shape.dims())
    user_check(d == kBatch || d > 0, loc) << "broadcast_to: dimension " << d << " in "
                                          << shape.str() << in_scope(g)
                                          << " must be positive or kBatch";
  user_check(x.rank() <= shape.rank(), loc)
      << "broadcast_to: cannot broadcast " << x.describe() << " to " << shape.str()
      << in_scope(g) << ": the target has fewer axes; use sum() or reshape() to drop axes";
  const int lead = shape.rank() - x.rank();
  for (int i = 0; i < x.rank(); ++i) {
    const int64_t from = x.shape()[i], to = shape[lead + i];
    // 1 stretches to anything, B included; B itself only stays B.
    user_check(from == to || from == 1, loc)
        << "broadcast_to: cannot broadcast " << x.describe() << " to " << shape.str()
        << in_scope(g) << ": axis " << i << " is " << dim_str(from) << " but the target's is "
        << dim_str(to) << "; numpy rules: each dimension must equal the target's or be 1";
  }
  return make(g, Op::BroadcastTo, {x.id()}, std::move(shape), x.dtype(), {}, loc);
}

Tensor slice(Tensor x, std::vector<int64_t> begin, std::vector<int64_t> end, Loc loc) {
  Graph& g = graph_of_one(x, "slice", loc);
  user_check(static_cast<int>(begin.size()) == x.rank() && end.size() == begin.size(), loc)
      << "slice: " << x.describe() << in_scope(g) << " has " << x.rank()
      << " axes but got begin " << list_str(begin) << " and end " << list_str(end)
      << "; give one begin and one end per axis";
  std::vector<int64_t> dims(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    const int64_t d = x.shape()[i];
    if (d == kBatch) {
      user_check(begin[i] == 0 && end[i] == kBatch, loc)
          << "slice: axis " << i << " of " << x.describe() << in_scope(g)
          << " is the batch dimension and must be taken whole, but got [" << begin[i] << ", "
          << end[i] << "); use begin 0 and end kBatch (towers split the batch, not the model)";
      dims[i] = kBatch;
      continue;
    }
    user_check(0 <= begin[i] && begin[i] < end[i] && end[i] <= d, loc)
        << "slice: axis " << i << " of " << x.describe() << in_scope(g) << ": [" << begin[i]
        << ", " << end[i] << ") is not a non-empty range within [0, " << d
        << "); need 0 <= begin < end <= " << d;
    dims[i] = end[i] - begin[i];
  }
  Attrs attrs;
  attrs.begin = std::move(begin);
  attrs.end = std::move(end);
  return make(g, Op::Slice, {x.id()}, Shape(std::move(dims)), x.dtype(), attrs, loc);
}

Tensor pad(Tensor x, std::vector<int64_t> low, std::vector<int64_t> high, Loc loc) {
  Graph& g = graph_of_one(x, "pad", loc);
  user_check(static_cast<int>(low.size()) == x.rank() && high.size() == low.size(), loc)
      << "pad: " << x.describe() << in_scope(g) << " has " << x.rank() << " axes but got low "
      << list_str(low) << " and high " << list_str(high) << "; give one width per axis";
  std::vector<int64_t> dims(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    const int64_t d = x.shape()[i];
    user_check(low[i] >= 0 && high[i] >= 0, loc)
        << "pad: axis " << i << " of " << x.describe() << in_scope(g) << ": widths " << low[i]
        << " and " << high[i] << " must be non-negative; use slice() to remove elements";
    user_check(d != kBatch || (low[i] == 0 && high[i] == 0), loc)
        << "pad: axis " << i << " of " << x.describe() << in_scope(g)
        << " is the batch dimension and cannot be padded (got " << low[i] << " and " << high[i]
        << "); use 0 for it";
    dims[i] = d == kBatch ? kBatch : d + low[i] + high[i];
  }
  Attrs attrs;
  attrs.begin = std::move(low);
  attrs.end = std::move(high);
  return make(g, Op::Pad, {x.id()}, Shape(std::move(dims)), x.dtype(), attrs, loc);
}

Tensor concat(const std::vector<Tensor>& xs, int axis, Loc loc) {
  user_check(!xs.empty(), loc) << "concat: the list of tensors is empty"
                               << in_scope(Graph::current()) << "; pass at least one tensor";
  Operand first(xs[0], loc);
  Graph& g = graph_of({&first}, "concat", loc);
  for (const Tensor& x : xs) {
    Operand o(x, loc);
    graph_of({&first, &o}, "concat", loc);
  }
  if (xs.size() == 1) return xs[0];
  const Tensor& x0 = xs[0];
  const int a = one_axis(axis, x0, "concat", loc);
  std::vector<int64_t> dims = x0.shape().dims();
  dims[a] = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    const Tensor& x = xs[k];
    const char* why = x.dtype() != x0.dtype() ? "dtypes differ; convert with cast()"
                      : x.rank() != x0.rank() ? "ranks differ; make them equal with reshape()"
                                              : nullptr;
    user_check(!why, loc) << "concat: cannot concatenate " << x0.describe() << " and "
                          << x.describe() << " (input " << k << ")" << in_scope(g) << ": " << why;
    for (int i = 0; i < x.rank(); ++i) {
      user_check(i == a || x.shape()[i] == x0.shape()[i], loc)
          << "concat: cannot concatenate " << x0.describe() << " and " << x.describe()
          << " (input " << k << ") along axis " << a << in_scope(g) << ": axis " << i
          << " differs (" << dim_str(x0.shape()[i]) << " vs " << dim_str(x.shape()[i])
          << "); every axis but the concatenated one must match";
    }
    user_check(x.shape()[a] != kBatch, loc)
        << "concat: axis " << a << " of " << x.describe() << in_scope(g)
        << " is the batch dimension; concatenate along another axis (the runtime joins towers' "
        << "batches itself)";
    dims[a] += x.shape()[a];
  }
  std::vector<int> ids;
  for (const Tensor& x : xs) ids.push_back(x.id());
  Attrs attrs;
  attrs.axis = a;
  return make(g, Op::Concat, std::move(ids), Shape(std::move(dims)), x0.dtype(), attrs, loc);
}

// The axis split() cuts, checked: it must not be the batch (towers split the batch).
static int split_axis(const Tensor& x, int axis, Loc loc) {
  const int a = one_axis(axis, x, "split", loc);
  user_check(x.shape()[a] != kBatch, loc)
      << "split: axis " << a << " of " << x.describe() << in_scope(x.graph())
      << " is the batch dimension; split another axis (towers split the batch)";
  return a;
}

std::vector<Tensor> split(Tensor x, int parts, int axis, Loc loc) {
  Graph& g = graph_of_one(x, "split", loc);
  const int a = split_axis(x, axis, loc);
  const int64_t d = x.shape()[a];
  user_check(parts >= 1 && d % parts == 0, loc)
      << "split: axis " << a << " of " << x.describe() << " has size " << d
      << ", which does not divide into " << parts << " equal parts" << in_scope(g)
      << "; use a divisor of " << d
      << " or split(x, sizes, axis) with the sizes spelled out";
  return split(x, std::vector<int64_t>(parts, d / parts), a, loc);
}

std::vector<Tensor> split(Tensor x, std::vector<int64_t> sizes, int axis, Loc loc) {
  Graph& g = graph_of_one(x, "split", loc);
  const int a = split_axis(x, axis, loc);
  const int64_t d = x.shape()[a];
  const bool positive = std::all_of(sizes.begin(), sizes.end(), [](int64_t s) { return s > 0; });
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  user_check(!sizes.empty() && positive && total == d, loc)
      << "split: sizes " << list_str(sizes) << " add up to " << total << " but axis " << a
      << " of " << x.describe() << in_scope(g) << " has " << d
      << "; give positive sizes that add up to " << d;
  std::vector<Tensor> out;
  std::vector<int64_t> begin(x.rank(), 0), end = x.shape().dims();
  for (int64_t s : sizes) {
    end[a] = begin[a] + s;
    out.push_back(slice(x, begin, end, loc));
    begin[a] = end[a];
  }
  return out;
}

}  // namespace towerjit
