#include "jit/passes/mask_pool_grads.h"

namespace towerjit {
namespace {

bool is_zero(const Graph& g, int id) {
  const Node& n = g.node(id);
  return n.op == Op::Constant && n.attrs.value == 0;
}

// The pool gradient select(p > 0, max_pool2d_grad(p, dy), 0) masks, or -1.
int masked_pool_grad(const Graph& g, const Node& select) {
  if (select.op != Op::Select || !is_zero(g, select.inputs[2])) return -1;
  const Node& mask = g.node(select.inputs[0]);
  const int grad = select.inputs[1];
  const Node& pool = g.node(grad);
  if (mask.op != Op::Greater || !is_zero(g, mask.inputs[1]) || pool.op != Op::MaxPool2DGrad ||
      pool.attrs.relu_mask || pool.inputs[0] != mask.inputs[0] || pool.shape != select.shape ||
      pool.dtype != select.dtype)
    return -1;
  return grad;
}

}  // namespace

Rewritten mask_pool_grads(const Graph& graph) {
  std::vector<int> readers(graph.size(), 0);
  for (int id = 0; id < graph.size(); ++id)
    for (int in : graph.node(id).inputs) readers[in]++;
  std::vector<bool> rewrite(graph.size(), false);
  for (int id = 0; id < graph.size(); ++id) {
    const int grad = masked_pool_grad(graph, graph.node(id));
    rewrite[id] = grad >= 0 && readers[grad] == 1;
  }
  int id = 0;  // the old id of the node visited: rewrite_graph goes in id order
  return rewrite_graph(graph, [&](Node node, Graph& out) {
    if (!rewrite[id++]) return out.add(std::move(node));
    Node masked = out.node(node.inputs[1]);
    masked.attrs.relu_mask = true;
    return out.add(std::move(masked));
  });
}

}  // namespace towerjit
