// Common-subexpression elimination: nodes with the same op, inputs, attributes, shape and
// dtype become one (the first). Gradients often rebuild what the forward pass has.
#pragma once

#include "jit/passes/rewrite.h"

namespace towerjit {

Rewritten eliminate_common_subexpressions(const Graph& graph);

}  // namespace towerjit
