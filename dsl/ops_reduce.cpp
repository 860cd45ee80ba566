// Reductions (one node each) and l2_loss, which is built from them.
#include "dsl/ops_internal.h"

namespace towerjit {

using namespace detail;

namespace {

// `name` is the user-facing function ("max"), not the node's op name ("reduce_max"), so a
// message names what the user called.
Tensor reduce(Op op, const char* name, Tensor x, const std::vector<int>& axes, bool keepdims,
              Loc loc) {
  Operand o(x, loc);
  Graph& g = graph_of({&o}, name, loc);
  // The mean of integers would have to round; ask for an explicit cast instead.
  if (op == Op::ReduceMean || op == Op::ReduceLogSumExp) require_f32(x, name, loc);
  Attrs attrs;
  attrs.axes = normalize_axes(axes, x, name, loc);
  attrs.keepdims = keepdims;
  std::vector<int64_t> dims;
  size_t next = 0;  // attrs.axes is sorted, so one pass over the axes suffices
  for (int i = 0; i < x.rank(); ++i) {
    const bool reduced = next < attrs.axes.size() && attrs.axes[next] == i;
    if (reduced) ++next;
    if (!reduced) dims.push_back(x.shape()[i]);
    else if (keepdims) dims.push_back(1);
  }
  return make(g, op, {x.id()}, Shape(std::move(dims)), x.dtype(), std::move(attrs), loc);
}

}  // namespace

Tensor sum(Tensor x, std::vector<int> axes, bool keepdims, Loc loc) {
  return reduce(Op::ReduceSum, "sum", x, axes, keepdims, loc);
}

Tensor mean(Tensor x, std::vector<int> axes, bool keepdims, Loc loc) {
  return reduce(Op::ReduceMean, "mean", x, axes, keepdims, loc);
}

Tensor max(Tensor x, std::vector<int> axes, bool keepdims, Loc loc) {
  return reduce(Op::ReduceMax, "max", x, axes, keepdims, loc);
}

Tensor logsumexp(Tensor x, std::vector<int> axes, bool keepdims, Loc loc) {
  return reduce(Op::ReduceLogSumExp, "logsumexp", x, axes, keepdims, loc);
}

Tensor l2_loss(Tensor x, Loc loc) {
  Operand o(x, loc);
  graph_of({&o}, "l2_loss", loc);
  require_f32(x, "l2_loss", loc);
  return mul(sum(mul(x, x, loc), {}, false, loc), Operand(0.5, loc), loc);
}

Tensor l2_loss(const std::vector<Tensor>& xs, Loc loc) {
  // An empty list is almost always a model built before its variables exist; a silent zero
  // would hide that the regulariser does nothing.
  user_check(!xs.empty(), loc)
      << "l2_loss: the list of tensors is empty" << in_scope(Graph::current())
      << "; build the layers (which create the variables) before asking for their l2_loss";
  Tensor total = l2_loss(xs[0], loc);
  for (size_t i = 1; i < xs.size(); ++i) total = add(total, l2_loss(xs[i], loc), loc);
  return total;
}

}  // namespace towerjit
