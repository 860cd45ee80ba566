#include "jit/passes/select_phase.h"

namespace towerjit {

Rewritten select_phase(const Graph& graph, Phase phase) {
  const int chosen = phase == Phase::training ? 0 : 1;
  return rewrite_graph(graph, [&](Node n, Graph& out) {
    return n.op == Op::PhaseSelect ? n.inputs[chosen] : out.add(std::move(n));
  });
}

bool depends_on_phase(const Graph& graph) {
  for (const Node& n : graph.nodes())
    if (n.op == Op::PhaseSelect) return true;
  return false;
}

}  // namespace towerjit
