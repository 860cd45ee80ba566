// The whole lowering as one readable list (Halide's Lower.cpp): graph passes, then fusion into
// the kernel IR. Buffer planning runs when the batch size is known (jit/passes/buffer_plan.h).
#pragma once

#include <vector>

#include "dsl/graph.h"
#include "jit/kir/kernel_ir.h"

namespace towerjit {

struct LoweredProgram {
  Graph graph;           // the optimised graph the program's node ids refer to
  kir::Program program;
};

// Optimises a copy of `graph` and lowers what `fetches` and `update_ops` need: what a
// CpuProgram compiles.
LoweredProgram lower_graph(const Graph& graph, const std::vector<int>& fetches,
                           const std::vector<int>& update_ops);

// lower_graph with the kernel-IR passes only the GPU's programs take (each pass's header says
// why the CPU's do not): what a CudaProgram runs and dump_cuda writes.
LoweredProgram lower_graph_for_gpu(const Graph& graph, const std::vector<int>& fetches,
                                   const std::vector<int>& update_ops);

}  // namespace towerjit
