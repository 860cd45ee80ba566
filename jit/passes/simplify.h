// Algebraic simplification: identities (x*1, x+0, x/1, -(-x)), no-op layout (a reshape,
// transpose, broadcast or cast that changes nothing; two reshapes or transposes in a row) and
// folding of arithmetic on constants. Autodiff leaves many of these behind.
#pragma once

#include "jit/passes/rewrite.h"

namespace towerjit {

Rewritten simplify(const Graph& graph);

}  // namespace towerjit
