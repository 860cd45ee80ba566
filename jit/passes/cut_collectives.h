// The tower runtime's cut at collectives (dsl/collectives.h): a copy of the graph in which
// every all_reduce node is an input named by its key, with the collective's shape and dtype.
// What comes after the collectives (the optimiser's apply) then compiles as a program of its
// own, fed the combined values by the runtime; what comes before (the loss and gradients) is
// compiled from the original graph, where nothing the towers fetch reads a collective.
#pragma once

#include <string>
#include <vector>

#include "dsl/tensor.h"
#include "jit/passes/rewrite.h"

namespace towerjit {

// One all_reduce node of a graph: its key, its id, and the id of the value it combines.
struct Collective {
  std::string key;
  int node = -1;
  int value = -1;
};

// The graph's collectives in node order.
std::vector<Collective> collectives_of(const Graph& graph);

// The copy with collectives as inputs; `remap` takes the old ids to the copy's. With a
// `scale` name, each collective is its input times one scalar f32 input of that name, which
// the runtime feeds the factor its strategy applies after the collective (an async tower's
// 1/N; 1 after a sync all-reduce, whose weights are in the sum): the multiply then fuses into
// the apply's kernels instead of being a pass of its own. Errors (towerjit::Error): an input
// of the graph already has a collective's key (or the scale's name) as its name.
Rewritten cut_at_collectives(const Graph& graph, const std::string& scale = "");

}  // namespace towerjit
