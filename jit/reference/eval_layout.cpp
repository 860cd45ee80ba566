// Reductions and layout ops: every output element found from its multi-index, one at a time.
#include <algorithm>
#include <cmath>
#include <limits>

#include "dsl/error.h"
#include "jit/reference/eval.h"

namespace towerjit::reference {

namespace {

// attrs.axes as a mask over `rank` axes; an empty list means every axis (as the DSL's).
std::vector<bool> axis_mask(const std::vector<int>& axes, int rank) {
  std::vector<bool> mask(rank, axes.empty());
  for (int axis : axes) {
    auto a = normalize_axis(axis, rank);
    internal_check(a.has_value()) << "axis " << axis << " for rank " << rank;
    mask[*a] = true;
  }
  return mask;
}

int checked_axis(int axis, int rank) {
  auto a = normalize_axis(axis, rank);
  internal_check(a.has_value()) << "axis " << axis << " for rank " << rank;
  return *a;
}

}  // namespace

Array eval_reduce(const EvalArgs& a) {
  const Array& x = a.in(0);
  const std::vector<bool> reduced = axis_mask(a.node.attrs.axes, x.shape.rank());
  // The output with reduced axes kept as 1 has the same row-major order as without them.
  Shape kept = x.shape;
  int64_t count = 1;
  for (int i = 0; i < kept.rank(); ++i)
    if (reduced[i]) {
      count *= kept[i];
      kept[i] = 1;
    }
  Array out = a.result();
  internal_check(out.size() == kept.elements(0)) << out.shape.str() << " vs " << kept.str();
  const bool is_max = a.node.op == Op::ReduceMax || a.node.op == Op::ReduceLogSumExp;
  std::fill(out.data.begin(), out.data.end(),
            is_max ? -std::numeric_limits<double>::infinity() : 0.0);
  const std::vector<int64_t> kept_strides = strides_of(kept);
  auto out_index = [&](int64_t i) {
    std::vector<int64_t> index = unravel(i, x.shape);
    for (int d = 0; d < kept.rank(); ++d)
      if (reduced[d]) index[d] = 0;
    return ravel(index, kept_strides);
  };
  for (int64_t i = 0; i < x.size(); ++i) {
    double& acc = out[out_index(i)];
    // A NaN anywhere in the slice is the maximum (PyTorch's amax): once acc is NaN it stays.
    if (is_max) acc = std::isnan(acc) || acc >= x[i] ? acc : x[i];
    else acc += x[i];
  }
  if (a.node.op == Op::ReduceMean)
    for (double& v : out.data) v /= static_cast<double>(count);
  if (a.node.op == Op::ReduceLogSumExp) {
    // The definition, shifted by the maximum: max + log(sum(exp(x - max))).
    std::vector<double> sums(out.size(), 0.0);
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t o = out_index(i);
      sums[o] += std::exp(x[i] - out[o]);
    }
    for (int64_t o = 0; o < out.size(); ++o)
      if (std::isfinite(out[o])) out[o] += std::log(sums[o]);
  }
  return out;
}

Array eval_count(const EvalArgs& a) {
  const Array& x = a.in(0);
  const std::vector<bool> counted = axis_mask(a.node.attrs.axes, x.shape.rank());
  int64_t count = 1;
  for (int i = 0; i < x.shape.rank(); ++i)
    if (counted[i]) count *= x.shape[i];
  Array out = a.result();
  out.data.assign(out.data.size(), static_cast<double>(count));
  return out;
}

Array eval_reshape(const EvalArgs& a) {
  Array out = a.result();
  internal_check(out.size() == a.in(0).size())
      << "reshape " << a.in(0).shape.str() << " to " << out.shape.str();
  out.data = a.in(0).data;
  return out;
}

Array eval_transpose(const EvalArgs& a) {
  const Array& x = a.in(0);
  std::vector<int> perm = a.node.attrs.axes;
  if (perm.empty())  // the DSL's default: reverse the axes
    for (int i = x.shape.rank() - 1; i >= 0; --i) perm.push_back(i);
  internal_check(static_cast<int>(perm.size()) == x.shape.rank()) << "perm of wrong length";
  const std::vector<int64_t> x_strides = strides_of(x.shape);
  Array out = a.result();
  for (int64_t i = 0; i < out.size(); ++i) {
    const std::vector<int64_t> index = unravel(i, out.shape);
    int64_t from = 0;
    // Output axis d is input axis perm[d].
    for (size_t d = 0; d < perm.size(); ++d) from += index[d] * x_strides[perm[d]];
    out[i] = x[from];
  }
  return out;
}

Array eval_broadcast_to(const EvalArgs& a) {
  const Array& x = a.in(0);
  Array out = a.result();
  for (int64_t i = 0; i < out.size(); ++i)
    out[i] = x[broadcast_index(x.shape, unravel(i, out.shape))];
  return out;
}

Array eval_slice(const EvalArgs& a) {
  // The output shape gives each extent (a batch axis's end is the symbol B); begin the offset.
  const Array& x = a.in(0);
  const std::vector<int64_t>& begin = a.node.attrs.begin;
  internal_check(static_cast<int>(begin.size()) == x.shape.rank()) << "slice begin rank";
  const std::vector<int64_t> x_strides = strides_of(x.shape);
  Array out = a.result();
  for (int64_t i = 0; i < out.size(); ++i) {
    std::vector<int64_t> index = unravel(i, out.shape);
    for (size_t d = 0; d < index.size(); ++d) index[d] += begin[d];
    out[i] = x[ravel(index, x_strides)];
  }
  return out;
}

Array eval_pad(const EvalArgs& a) {
  const Array& x = a.in(0);
  const std::vector<int64_t>& low = a.node.attrs.begin;
  internal_check(static_cast<int>(low.size()) == x.shape.rank()) << "pad widths rank";
  const std::vector<int64_t> x_strides = strides_of(x.shape);
  Array out = a.result();  // zeros
  const std::vector<int64_t> out_strides = strides_of(out.shape);
  for (int64_t i = 0; i < x.size(); ++i) {
    std::vector<int64_t> index = unravel(i, x.shape);
    for (size_t d = 0; d < index.size(); ++d) index[d] += low[d];
    out[ravel(index, out_strides)] = x[i];
  }
  return out;
}

Array eval_concat(const EvalArgs& a) {
  Array out = a.result();
  const int axis = checked_axis(a.node.attrs.axis, out.shape.rank());
  const std::vector<int64_t> out_strides = strides_of(out.shape);
  int64_t offset = 0;  // where the current input starts along the axis
  for (const Array* x : a.inputs) {
    for (int64_t i = 0; i < x->size(); ++i) {
      std::vector<int64_t> index = unravel(i, x->shape);
      index[axis] += offset;
      out[ravel(index, out_strides)] = (*x)[i];
    }
    offset += x->shape[axis];
  }
  internal_check(offset == out.shape[axis]) << "concat sizes add to " << offset;
  return out;
}

}  // namespace towerjit::reference
