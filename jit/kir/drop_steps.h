// Removing steps from a program: what a pass does once it has moved a step's work elsewhere
// (into the reduction before it, into the kernels that read it).
#pragma once

#include <set>

#include "jit/kir/kernel_ir.h"

namespace towerjit::kir {

// `p` without the steps numbered in `dropped`, and without the kernels and library calls no step
// left runs; the rest keep their order, renumbered.
Program drop_steps(Program p, const std::set<int>& dropped);

}  // namespace towerjit::kir
