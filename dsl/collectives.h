// Collectives: where values cross between towers, as nodes of the graph. build_tower_program
// (dsl/tower_program.h) puts an all_reduce on every gradient; the tower runtime cuts the graph
// there (jit/passes/cut_collectives.h), compiles what comes before for every tower and what
// comes after (the optimiser's apply) once per replica, and maps each collective to an
// implementation (CPU towers: an in-process all-reduce in a fixed order; GPUs: NCCL). Compiled
// as one program on one device, a collective is its input: the combination of one tower.
#pragma once

#include <string>

#include "dsl/tensor.h"

namespace towerjit {

// The towers' combination of `x` as the strategy defines it: the slice-weighted sum of the
// towers' values for sync average, their mean or sum for the other sync reductions; with
// async apply each tower's own value (times 1/N with scale_gradient). `key` names it (unique in
// the graph): the apply side reads the result as the input of that name. Not differentiable.
// Errors: an empty or repeated key, an i32 tensor.
Tensor all_reduce(Tensor x, const std::string& key, Loc loc = Loc::current());

}  // namespace towerjit
