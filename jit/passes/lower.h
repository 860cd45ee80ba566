// Graph -> kernel IR: decides which nodes get buffers, fuses everything else into the loop
// kernels that read them, and maps matrix products, convolutions and pools to library calls.
#pragma once

#include <vector>

#include "dsl/graph.h"
#include "jit/kir/kernel_ir.h"
#include "jit/passes/fusion_plan.h"

namespace towerjit {

// Lowers the nodes `fetches` and `update_ops` (Assign nodes) need into a program whose
// Program::fetches lists one buffer per fetch. Update ops write their variables in copy steps
// at the end, after every read of the old values.
kir::Program lower_to_kernels(const Graph& graph, const std::vector<int>& fetches,
                              const std::vector<int>& update_ops, FusionLimits limits = {});

}  // namespace towerjit
