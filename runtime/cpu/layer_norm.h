// The fused layer norm ops (ops.def: LayerNorm, LayerNormGradInput, LayerNormGradParams) on
// the CPU. The forward and the input's gradient take one row at a time through its statistics
// and its output (a row of a transformer is a few hundred floats: it stays in L1 between the
// passes), split over the pool by blocks of rows. The gain's and bias' gradients are column
// sums over the rows: partial sums over fixed blocks of rows, then the blocks added in order,
// so the result does not depend on the thread count. No atomics; the same bits every run.
#pragma once

#include <vector>

#include "dsl/node.h"
#include "runtime/cpu/library.h"
#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// in: x, gain[, bias] -> y of x's shape.
void layer_norm(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool);
// in: x, gain, d y -> d x.
void layer_norm_grad_input(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool);
// in: x, d y -> [2, F]: d gain, d bias ([1, F] for rms).
void layer_norm_grad_params(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool);

}  // namespace towerjit::cpujit
