// Matrix products, one-hot, argmax, random numbers and assign.
#include <cmath>
#include <sstream>

#include "dsl/error.h"
#include "dsl/index_errors.h"
#include "dsl/philox.h"
#include "jit/reference/eval.h"

namespace towerjit::reference {

Array eval_matmul(const EvalArgs& a) {
  const Array &x = a.in(0), &y = a.in(1);
  Array out = a.result();
  const int rank = out.shape.rank();
  internal_check(x.shape.rank() >= 2 && y.shape.rank() >= 2 && rank >= 2)
      << "matmul of " << x.shape.str() << " and " << y.shape.str();
  const int64_t m = x.shape[x.shape.rank() - 2], k = x.shape[x.shape.rank() - 1];
  const int64_t n = y.shape[y.shape.rank() - 1];
  internal_check(y.shape[y.shape.rank() - 2] == k) << "matmul inner dimensions";
  // Batch dimensions broadcast: each output matrix reads the matrices numpy maps it to.
  const Shape out_batch = leading_dims(out.shape, rank - 2);
  const Shape x_batch = leading_dims(x.shape, x.shape.rank() - 2);
  const Shape y_batch = leading_dims(y.shape, y.shape.rank() - 2);
  for (int64_t b = 0; b < out_batch.elements(0); ++b) {
    const std::vector<int64_t> index = unravel(b, out_batch);
    const int64_t xo = broadcast_index(x_batch, index) * m * k;
    const int64_t yo = broadcast_index(y_batch, index) * k * n;
    const int64_t oo = b * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += x[xo + i * k + p] * y[yo + p * n + j];
        out[oo + i * n + j] = acc;
      }
  }
  return out;
}

Array eval_one_hot(const EvalArgs& a) {
  const Array& labels = a.in(0);
  const int64_t depth = a.node.attrs.depth;
  Array out = a.result();  // zeros
  internal_check(out.size() == labels.size() * depth) << "one_hot output " << out.shape.str();
  for (int64_t i = 0; i < labels.size(); ++i) {
    const double v = labels[i];  // an i32 label: whole
    // The backends' words (dsl/index_errors.h), so the oracle and a program agree.
    if (!(v >= 0 && v < static_cast<double>(depth))) throw detail::one_hot_out_of_range(a.node, static_cast<int64_t>(v), i);
    out[i * depth + static_cast<int64_t>(v)] = 1;
  }
  return out;
}

Array eval_argmax(const EvalArgs& a) {
  const Array& x = a.in(0);
  auto axis = normalize_axis(a.node.attrs.axis, x.shape.rank());
  internal_check(axis.has_value()) << "argmax axis " << a.node.attrs.axis;
  // x viewed as [outer, n, inner]; the output as [outer, inner].
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < *axis; ++d) outer *= x.shape[d];
  for (int d = *axis + 1; d < x.shape.rank(); ++d) inner *= x.shape[d];
  const int64_t n = x.shape[*axis];
  Array out = a.result();
  internal_check(out.size() == outer * inner) << "argmax output " << out.shape.str();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      int64_t best = 0;
      // Strictly greater: the first maximum wins. A NaN is larger than every number (the first
      // NaN wins), so argmax points where max() finds its NaN, as PyTorch's.
      for (int64_t j = 1; j < n; ++j) {
        const double v = x[(o * n + j) * inner + in], b = x[(o * n + best) * inner + in];
        if (v > b || (std::isnan(v) && !std::isnan(b))) best = j;
      }
      out[o * inner + in] = static_cast<double>(best);
    }
  return out;
}

Array eval_random_uniform(const EvalArgs& a) {
  Array out = a.result();
  for (int64_t i = 0; i < out.size(); ++i)
    out[i] = philox_uniform(a.node.attrs.seed, a.step, static_cast<uint64_t>(i));
  return out;
}

Array eval_assign(const EvalArgs& a) {
  Array out = a.result();
  internal_check(out.size() == a.in(1).size()) << "assign of " << a.in(1).shape.str();
  out.data = a.in(1).data;
  return out;
}

}  // namespace towerjit::reference
