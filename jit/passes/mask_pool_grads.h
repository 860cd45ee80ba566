// A ReLU's mask taken into the max pool gradient after it:
//   select(p > 0, max_pool2d_grad(p, dy), 0)  ->  max_pool2d_grad(p, dy) with relu_mask
// where p is the pool's input (a ReLU's output: autodiff masks the ReLU's gradient on its output,
// dsl/grad_rules.cpp).
//
// Why: the pool gradient reads p to find each window's first maximum, and routes dy to it; the
// ReLU's backward then read p again for its mask, and, since a residual block's gradient goes
// two ways, stored the masked gradient. With the mask in the pool's routine, that kernel reads
// the pool gradient alone and stores nothing: in the resnet, one read and one write of a block's
// output fewer per pool.
//
// The same value, bit for bit: dy reaches only first maxima, and the mask at a first maximum
// i of window w is p[i] > 0 where the routine has p[i] at hand. Rewritten only where the select's
// other branch is the constant 0, the comparison is with the constant 0, and the select is the
// pool gradient's only reader in the graph. The unmasked node stays beside it, computed only if
// something still needs it (a fetched pool gradient, as grad(loss, {pool's input}) returns).
#pragma once

#include "jit/passes/rewrite.h"

namespace towerjit {

Rewritten mask_pool_grads(const Graph& graph);

}  // namespace towerjit
