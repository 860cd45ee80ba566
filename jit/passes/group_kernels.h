// Kernel grouping: independent elementwise kernels become one group kernel (kir::Kernel::parts)
// that runs as one launch over their concatenated points. An optimiser's apply, one update
// kernel per variable (and per slot), is then one or two launches whatever the model's size.
#pragma once

#include "jit/kir/kernel_ir.h"

namespace towerjit {

// The most parts one group takes: each part costs every point of the group one comparison on a
// GPU (the segment if-chain) and adds its buffers to the kernel's parameters.
inline constexpr int kMaxGroupParts = 32;

// First, an elementwise kernel that reads a variable an earlier elementwise kernel updated, at
// exactly the points it loops over, joins that kernel (an Adam update's weight reads its new
// moments: m, v and the weight become one kernel), when nothing in between stops it.
// Then it walks the steps in order; an elementwise kernel (no reduction) joins the earliest group it
// can reach: moving back over steps it does not depend on (no buffer one writes and the other
// reads or writes), into a group none of whose parts it depends on either. Parts of a group
// are thus independent and may run in any order or at once. Each part's loop axes are first
// coalesced where every access allows (a [784,64] weight update becomes a loop over 50176
// points), so a part is a plain counted loop. Reductions, library calls and copies are never
// grouped; they only stop a kernel that depends on them. Groups of one stay plain kernels.
kir::Program group_kernels(kir::Program program);

}  // namespace towerjit
