// The frame every graph pass is written in: a new graph is built node by node from the old one,
// and the pass decides, for each node, what stands for it in the new graph.
#pragma once

#include <functional>
#include <vector>

#include "dsl/graph.h"
#include "dsl/tensor.h"

namespace towerjit {

struct Rewritten {
  Graph graph;
  std::vector<int> remap;  // old node id -> new node id
};

// `visit(node, out)` gets the old node with its inputs already renamed to ids of `out`, and
// returns the id in `out` that computes the same value: `out.add(node)` to keep it, or an
// existing id to replace it. Variables, inputs, update ops and regularisation losses follow.
Rewritten rewrite_graph(const Graph& graph, const std::function<int(Node node, Graph& out)>& visit);

// Old ids -> new ids.
std::vector<int> remap_ids(const std::vector<int>& ids, const std::vector<int>& remap);
// `tensors` of the original graph as the same nodes of the copy.
std::vector<Tensor> remap_tensors(Rewritten& rewritten, const std::vector<Tensor>& tensors);

}  // namespace towerjit
