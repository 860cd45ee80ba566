// Loop-axis coalescing: adjacent loop axes that every access of a kernel walks as one (the
// stride of the outer axis is the inner one's times its extent) become one axis. A group's
// parts are coalesced when grouped (jit/passes/group_kernels.h); the CPU emitter coalesces
// every plain kernel, reductions included, so the innermost loop is as long as the data lets it
// be: a batch-norm statistic over [B,C,28,28] reduces [B,C,784] along 784 contiguous floats, a
// trip count the loop vectoriser can use, where 28 (or 14) is shorter than one unrolled vector
// iteration.
#pragma once

#include "jit/kir/kernel_ir.h"

namespace towerjit {

// Merges loop axes a and a+1 of a plain kernel wherever every access walks them as one, both
// extents are constant and, in a reduction, both are reduced or neither is (reduce_axes are
// renumbered). A kernel that reads its loop indices (iota) keeps its axes. Group kernels are
// returned as they are (their parts are coalesced by the grouping pass).
kir::Kernel coalesce_axes(kir::Kernel kernel);

}  // namespace towerjit
