// The fused softmax ops (ops.def: Softmax, SoftmaxGrad) on the CPU: one row at a time, over the
// last axis, split over the pool by blocks of rows. A row is read from memory once per op (its
// second and third passes find it in L1), where the composed form's two kernels each read it.
// Sums run in fixed lanes added in a fixed tree: the same bits at every thread count and run.
#pragma once

#include <vector>

#include "runtime/cpu/library.h"
#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// in: x -> y of x's shape, each row exp(x - max) / sum(exp(x - max)).
void softmax(const std::vector<View>& in, const View& out, ThreadPool* pool);
// in: y (the softmax's output), d y -> d x = y (d y - sum(y d y)) per row.
void softmax_grad(const std::vector<View>& in, const View& out, ThreadPool* pool);

}  // namespace towerjit::cpujit
