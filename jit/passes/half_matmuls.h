// The precision policy's pass: every matrix product of f32 operands takes them rounded to bf16
// (or f16) and accumulates in f32, as PyTorch's autocast does for matmuls; everything else,
// the variables (f32 masters), reductions, losses and the optimiser's apply, stays f32. It
// inserts a cast before each operand; lowering fuses a cast into the kernel that computes its
// operand (a bias add, an activation), so an activation's cast is no kernel of its own. A
// variable's or an input's cast has no producer kernel and is one small kernel each.
#pragma once

#include <optional>

#include "dsl/dtype.h"
#include "dsl/precision.h"
#include "jit/passes/rewrite.h"

namespace towerjit {

// `graph` with each MatMul of two f32 operands rewritten as matmul(cast(a, dtype), cast(b,
// dtype)) (dtype bf16 or f16); the result stays f32. Forward and backward products alike,
// since it runs on the training graph after autodiff.
Rewritten half_matmul_operands(const Graph& graph, DType dtype);

// The process's precision policy: programs lowered after set_precision_policy run
// half_matmul_operands first when matmul_operands is bf16 or f16. f32 (the default) leaves
// graphs as they are. Thread-safe. A trainer whose Towers declare a policy
// (Towers::precision) compiles under that one instead: see ScopedPrecisionPolicy.
void set_precision_policy(const PrecisionPolicy& policy, Loc loc = Loc::current());
// The policy lowering uses on this thread: the innermost ScopedPrecisionPolicy's, else the
// process's.
PrecisionPolicy precision_policy();

// While alive, precision_policy() on this thread returns `policy` (when it has a value), so a
// trainer compiles its programs under its own Towers' policy whatever the process's is.
class ScopedPrecisionPolicy {
 public:
  explicit ScopedPrecisionPolicy(const std::optional<PrecisionPolicy>& policy);
  ~ScopedPrecisionPolicy();
  ScopedPrecisionPolicy(const ScopedPrecisionPolicy&) = delete;
  ScopedPrecisionPolicy& operator=(const ScopedPrecisionPolicy&) = delete;

 private:
  std::optional<PrecisionPolicy> outer_;
};

}  // namespace towerjit
