#include "jit/passes/cut_collectives.h"

#include "dsl/error.h"

namespace towerjit {

std::vector<Collective> collectives_of(const Graph& graph) {
  std::vector<Collective> out;
  for (int id = 0; id < graph.size(); ++id)
    if (graph.node(id).op == Op::AllReduce) out.push_back({graph.node(id).attrs.name, id, graph.node(id).inputs[0]});
  return out;
}

Rewritten cut_at_collectives(const Graph& graph, const std::string& scale) {
  int scale_input = -1;  // created at the first collective
  return rewrite_graph(graph, [&](Node n, Graph& out) {
    if (n.op != Op::AllReduce) return out.add(std::move(n));
    for (const std::string& name : {n.attrs.name, scale})
      user_check(name.empty() || !out.find_input(name) || out.find_input(name) == scale_input, n)
          << "the collective \"" << n.attrs.name << "\" needs an input named \"" << name << "\" for the "
          << "apply side, and the graph already has one; rename that input";
    Node input = n;  // keeps the key (attrs.name), shape, dtype, location and scope
    input.op = Op::Input;
    input.inputs.clear();
    const int value = out.add(std::move(input));
    if (scale.empty()) return value;
    if (scale_input < 0) {
      Node s = n;
      s.op = Op::Input;
      s.inputs.clear();
      s.shape = Shape{};
      s.attrs.name = scale;
      scale_input = out.add(std::move(s));
    }
    Node times = n;
    times.op = Op::Mul;
    times.inputs = {value, scale_input};
    times.attrs = {};
    return out.add(std::move(times));
  });
}

}  // namespace towerjit
