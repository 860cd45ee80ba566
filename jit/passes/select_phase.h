// The choice of phase (dsl/phase.h) for a program: a copy of the graph in which every by_phase
// node is the value of the chosen phase. A program compiled from the copy selected for
// inference runs batch norm on its moving statistics and no dropout; lowering itself takes the
// training value of any by_phase node left (jit/passes/simplify.cpp).
#pragma once

#include "dsl/phase.h"
#include "jit/passes/rewrite.h"

namespace towerjit {

// The copy; `remap` takes the old ids to the copy's (remap_tensors in rewrite.h).
Rewritten select_phase(const Graph& graph, Phase phase);

// Whether the graph holds any by_phase node (a model that behaves differently in inference).
bool depends_on_phase(const Graph& graph);

}  // namespace towerjit
