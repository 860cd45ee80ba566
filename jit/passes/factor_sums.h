// Factors that do not vary along a sum's axes come out of the sum: sum(c * x) over axes A is
// c * sum(x) when c has extent 1 on every axis of A (a per-channel value beside an NCHW tensor),
// and the sum of a sum of such terms is the sum of their sums.
//
// Why: autodiff's batch-norm backward sums, per channel,
//   -(dy * rstd * gamma + 2 * (dvar * -0.5 * rstd^3 / n) * (x - mean)),
// whose second factor is itself a per-channel sum over the same tensor. Summed as written it
// waits for that sum: a pass of its own over dy and x, after the pass that found dvar. Factored,
// it is rstd * gamma * sum(dy) - 2 * (...) * sum(x - mean): sum(dy) is the sum that pass already
// makes, and sum(x - mean) joins it there as one more sibling (the fusion plan puts reductions
// over the same loop space and axes in one kernel), so a batch-norm layer's backward reads its
// tensors in two passes instead of three, on every backend.
//
// The sums change order (c * sum(x) rounds c's products once instead of at every point), within
// the same error bound. Only f32 sums and means are rewritten, and only where some term has a
// factor to take out and each term keeps a factor that varies. TOWERJIT_FACTOR_SUMS=off leaves
// them as written.
#pragma once

#include "jit/passes/rewrite.h"

namespace towerjit {

Rewritten factor_sums(const Graph& graph);

}  // namespace towerjit
