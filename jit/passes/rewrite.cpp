#include "jit/passes/rewrite.h"

namespace towerjit {

Rewritten rewrite_graph(const Graph& graph, const std::function<int(Node node, Graph& out)>& visit) {
  Rewritten r;
  r.remap.assign(graph.size(), -1);
  for (int id = 0; id < graph.size(); ++id) {
    Node node = graph.node(id);
    for (int& in : node.inputs) in = r.remap[in];
    if (node.grad_of >= 0) node.grad_of = r.remap[node.grad_of];
    r.remap[id] = visit(std::move(node), r.graph);
  }
  for (VariableInfo v : graph.variables()) {
    v.node = r.remap[v.node];
    r.graph.add_variable(std::move(v));
  }
  r.graph.update_ops = remap_ids(graph.update_ops, r.remap);
  r.graph.regularization_losses = remap_ids(graph.regularization_losses, r.remap);
  return r;
}

std::vector<int> remap_ids(const std::vector<int>& ids, const std::vector<int>& remap) {
  std::vector<int> out;
  for (int id : ids) out.push_back(remap[id]);
  return out;
}

std::vector<Tensor> remap_tensors(Rewritten& rewritten, const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.emplace_back(&rewritten.graph, rewritten.remap.at(t.id()));
  return out;
}

}  // namespace towerjit
