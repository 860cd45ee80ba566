#include "jit/passes/cut_collectives.h"

#include "dsl/error.h"

namespace towerjit {

std::vector<Collective> collectives_of(const Graph& graph) {
  std::vector<Collective> out;
  for (int id = 0; id < graph.size(); ++id)
    if (graph.node(id).op == Op::AllReduce) out.push_back({graph.node(id).attrs.name, id, graph.node(id).inputs[0]});
  return out;
}

Rewritten cut_at_collectives(const Graph& graph) {
  return rewrite_graph(graph, [&](Node n, Graph& out) {
    if (n.op != Op::AllReduce) return out.add(std::move(n));
    user_check(!out.find_input(n.attrs.name), n.loc)
        << "the collective \"" << n.attrs.name << "\" has the name of an input of the graph; "
        << "rename that input (the apply side reads the collective's result under this name)";
    n.op = Op::Input;  // keeps the key (attrs.name), shape, dtype, location and scope
    n.inputs.clear();
    return out.add(std::move(n));
  });
}

std::vector<Tensor> remap_tensors(Rewritten& cut, const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.emplace_back(&cut.graph, cut.remap.at(t.id()));
  return out;
}

}  // namespace towerjit
