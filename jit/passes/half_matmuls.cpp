#include "jit/passes/half_matmuls.h"

#include <mutex>

#include "dsl/error.h"
#include "jit/passes/fusion_plan.h"

namespace towerjit {
namespace {

std::mutex policy_mutex;
PrecisionPolicy& policy() {
  static PrecisionPolicy set;
  return set;
}
// A trainer's own policy while it compiles (ScopedPrecisionPolicy); empty: the process's.
thread_local std::optional<PrecisionPolicy> thread_override;

}  // namespace

void set_precision_policy(const PrecisionPolicy& p, Loc loc) {
  detail::check_precision_policy(p, "set_precision_policy", loc);
  std::lock_guard lock(policy_mutex);
  policy() = p;
}

PrecisionPolicy precision_policy() {
  if (thread_override) return *thread_override;
  std::lock_guard lock(policy_mutex);
  return policy();
}

ScopedPrecisionPolicy::ScopedPrecisionPolicy(const std::optional<PrecisionPolicy>& p) : outer_(thread_override) {
  if (p) thread_override = p;
}

ScopedPrecisionPolicy::~ScopedPrecisionPolicy() { thread_override = outer_; }

Rewritten half_matmul_operands(const Graph& graph, DType dtype) {
  internal_check(is_half_float(dtype)) << "half_matmul_operands to " << dtype_name(dtype);
  return rewrite_graph(graph, [dtype](Node n, Graph& out) {
    if (n.op != Op::MatMul || out.node(n.inputs[0]).dtype != DType::f32) return out.add(std::move(n));
    // The cast keeps the matmul's location and scope: a dump names the line of the product.
    auto cast = [&](int value) {
      return out.add(Node{.op = Op::Cast, .inputs = {value}, .shape = out.node(value).shape, .dtype = dtype,
                          .attrs = {}, .loc = n.loc, .stack = n.stack, .scope = n.scope, .grad_of = n.grad_of});
    };
    for (int& in : n.inputs) {
      // A transposed operand (the backward's x^T and W^T) is cast before its transpose, which
      // lowering then folds into the product's flags, and the cast is the forward's own (CSE):
      // cast(transpose(x)) had been a transposing kernel of its own per operand, strided reads
      // at a third of the copy bandwidth.
      if (Node transposed = out.node(in); swaps_last_two(transposed)) {  // a copy: add() may move nodes
        transposed.inputs = {cast(transposed.inputs[0])};
        transposed.dtype = dtype;
        in = out.add(std::move(transposed));
      } else {
        in = cast(in);
      }
    }
    return out.add(std::move(n));
  });
}

}  // namespace towerjit
