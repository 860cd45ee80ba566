// The precision policy's pass: every matrix product of f32 operands takes them rounded to bf16
// (or f16) and accumulates in f32, as PyTorch's autocast does for matmuls; everything else,
// the variables (f32 masters), reductions, losses and the optimiser's apply, stays f32. It
// inserts a cast before each operand; lowering fuses a cast into the kernel that computes its
// operand (a bias add, an activation), so an activation's cast is no kernel of its own. A
// variable's or an input's cast has no producer kernel and is one small kernel each.
#pragma once

#include "dsl/dtype.h"
#include "jit/passes/rewrite.h"

namespace towerjit {

// `graph` with each MatMul of two f32 operands rewritten as matmul(cast(a, dtype), cast(b,
// dtype)) (dtype bf16 or f16); the result stays f32. Forward and backward products alike,
// since it runs on the training graph after autodiff.
Rewritten half_matmul_operands(const Graph& graph, DType dtype);

// The process's precision policy, declared once: programs lowered after set_precision_policy
// (every CpuProgram, a trainer's too) run half_matmul_operands first when matmul_operands is
// bf16 or f16. f32 (the default) leaves graphs as they are. Thread-safe. A first cut of the
// issue's policy: a Towers / trainer option and the examples' --precision flag are to come.
struct PrecisionPolicy {
  DType matmul_operands = DType::f32;
};
void set_precision_policy(const PrecisionPolicy& policy);
PrecisionPolicy precision_policy();

}  // namespace towerjit
