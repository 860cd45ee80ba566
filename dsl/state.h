// Training state kept in variables: the global step, and the helpers optimisers and EMA use to
// make their own state (slots, shadows) and to read what a variable becomes this step.
#pragma once

#include <string>

#include "dsl/initializer.h"
#include "dsl/tensor.h"

namespace towerjit {

// The graph's global step: the non-trainable f32 scalar variable "global_step", starting at 0,
// created on first use (one per graph, whatever scope it is asked for in). It is f32, not an
// integer, so schedules and bias corrections compute on it with the same kernels as everything
// else; f32 holds every integer exactly up to 2^24 = 16,777,216 steps, beyond which the
// increment stalls. Reads see the value before this step's update ops run.
Tensor global_step(Loc loc = Loc::current());

// Adds the update op global_step <- global_step + 1 to the current graph and returns it; when
// an update op of the graph already increments it (an optimiser's apply), returns that one
// instead, so the step advances once per step however many applies a graph holds.
Tensor increment_global_step(Loc loc = Loc::current());

namespace detail {

// The variable named exactly `full_name` in `graph`, created (non-trainable, with `init`) when
// missing. Unlike variable(), the current scope does not prefix the name: optimiser slots and
// EMA shadows are keyed by their variable's full name, so towers applying under their own
// scopes share one set. Errors when the name exists with another shape or dtype.
Tensor state_variable(Graph& graph, const std::string& full_name, const Shape& shape,
                      const Initializer& init, Loc loc);

// What `variable` holds after this step's update ops: the value of the last update op that
// assigns it, else the variable itself (update ops read the old values, so anything that must
// follow an apply, like EMA, reads this instead).
Tensor pending_value(Tensor variable);

}  // namespace detail
}  // namespace towerjit
