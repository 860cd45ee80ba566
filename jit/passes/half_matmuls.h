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

}  // namespace towerjit
