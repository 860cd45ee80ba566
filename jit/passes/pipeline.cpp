#include "jit/passes/pipeline.h"

#include <cstdio>

#include "jit/knobs.h"
#include "jit/passes/conv_pools.h"
#include "jit/passes/cse.h"
#include "jit/passes/factor_sums.h"
#include "jit/passes/fold_batch_sums.h"
#include "jit/passes/fused_max_pools.h"
#include "jit/passes/group_kernels.h"
#include "jit/passes/half_convolutions.h"
#include "jit/passes/half_matmuls.h"
#include "jit/passes/lower.h"
#include "jit/passes/mask_pool_grads.h"
#include "jit/passes/reduction_finishers.h"
#include "jit/passes/epilogues.h"
#include "jit/passes/simplify.h"

namespace towerjit {
namespace {

// Applies a graph pass, carrying the ids the caller holds into the new graph, and prints the
// result at TOWERJIT_DEBUG >= 2 when the pass changed the node count.
template <typename Pass>
void run_pass(const char* name, Pass pass, Graph& graph, std::vector<int>& fetches) {
  Rewritten r = pass(graph);
  const bool changed = r.graph.size() != graph.size();
  fetches = remap_ids(fetches, r.remap);
  graph = std::move(r.graph);
  if (changed && knobs::debug_level() >= 2)
    std::fprintf(stderr, "towerjit: after %s (%d nodes)\n%s", name, graph.size(), graph.str().c_str());
}

Rewritten copy(const Graph& g) {
  return rewrite_graph(g, [](Node n, Graph& out) { return out.add(std::move(n)); });
}

// The CPU's and the GPU's lowering differ by the kernel-IR passes only the GPU takes (each
// pass's header says why the CPU does not).
enum class Target { cpu, gpu };

LoweredProgram lower_for(Target target, const Graph& graph, const std::vector<int>& fetches,
                         const std::vector<int>& update_ops) {
  // Update ops ride along with the fetches so the passes carry their ids over.
  std::vector<int> ids = fetches;
  ids.insert(ids.end(), update_ops.begin(), update_ops.end());
  Graph g = copy(graph).graph;

  if (const DType t = precision_policy().matmul_operands; t != DType::f32)  // the policy's casts
    run_pass("half matmul operands", [t](const Graph& in) { return half_matmul_operands(in, t); }, g, ids);
  if (const DType t = precision_policy().convolutions(); t != DType::f32)
    run_pass("half conv operands", [t](const Graph& in) { return half_conv_operands(in, t); }, g, ids);
  run_pass("simplify", simplify, g, ids);                           // x*1, x+0, constant math
  run_pass("cse", eliminate_common_subexpressions, g, ids);         // one node per value
  run_pass("simplify", simplify, g, ids);                           // what CSE exposed
  run_pass("mask pool grads", mask_pool_grads, g, ids);             // a ReLU's mask in the pool's gradient
  if (knobs::factor_sums_enabled()) {
    run_pass("factor sums", factor_sums, g, ids);                   // c * sum(x) for sum(c * x)
    run_pass("cse", eliminate_common_subexpressions, g, ids);       // the sums it exposed, once
    run_pass("simplify", simplify, g, ids);
  }

  const std::vector<int> new_fetches(ids.begin(), ids.begin() + fetches.size());
  const std::vector<int> new_updates(ids.begin() + fetches.size(), ids.end());
  kir::Program program = lower_to_kernels(g, new_fetches, new_updates);  // fusion
  program = fold_batch_summed_products(std::move(program));  // sum_b x_b^T dy_b as one product
  program = fuse_epilogues(std::move(program));       // act(x w + b) as the product's epilogue
  const bool gpu = target == Target::gpu;
  if (gpu && knobs::fused_max_pools_enabled())   // a 2x2 pool in the kernel making its input
    program = fuse_max_pools(std::move(program));  // (before grouping: that kernel stands alone)
  if (!gpu && knobs::fused_max_pools_enabled())    // a 2x2 pool in the convolution making its input
    program = pool_convolutions(std::move(program));
  if (knobs::group_kernels_enabled())
    program = group_kernels(std::move(program));  // independent elementwise kernels: one launch
  if (gpu && knobs::reduction_finishers_enabled())  // batch norm's per-channel kernel in its sums
    program = attach_reduction_finishers(std::move(program));
  if (knobs::debug_level() >= 3)
    std::fprintf(stderr, "towerjit: kernel IR (%s)\n%s", gpu ? "GPU" : "CPU", kir::to_string(program).c_str());
  return {std::move(g), std::move(program)};
}

}  // namespace

LoweredProgram lower_graph(const Graph& graph, const std::vector<int>& fetches,
                           const std::vector<int>& update_ops) {
  return lower_for(Target::cpu, graph, fetches, update_ops);
}

LoweredProgram lower_graph_for_gpu(const Graph& graph, const std::vector<int>& fetches,
                                   const std::vector<int>& update_ops) {
  return lower_for(Target::gpu, graph, fetches, update_ops);
}

}  // namespace towerjit
