// Convolutions on the CPU: the direct kernels (direct_conv.h) where they apply, else the
// whole batch's im2col columns feed one large sgemm (OpenBLAS is far faster on one big product
// than on one per image), with the column building and the layout shuffles split over the
// thread pool.
#pragma once

#include "dsl/node.h"
#include "runtime/cpu/conv_epilogue.h"
#include "runtime/cpu/library.h"
#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// `epilogue`: act(y + bias) on each image's output as it is written (conv_epilogue.h).
void conv2d(const Attrs& at, const View& x, const View& w, const View& y, ThreadPool* pool,
            const ConvEpilogue& epilogue = {});
// dy may be a routed pool gradient (library.h's RoutedPoolGradient).
void conv2d_grad_input(const Attrs& at, const View& dy, const View& w, const View& dx, ThreadPool* pool);
void conv2d_grad_filter(const Attrs& at, const View& x, const View& dy, const View& dw, ThreadPool* pool);

// Runs body(begin, end) over [0, n) on the pool, or inline without one.
void parallel(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& body);

}  // namespace towerjit::cpujit
