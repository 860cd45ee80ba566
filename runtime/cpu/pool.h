// Max and average pooling and their gradients on the CPU, split over (image, channel) planes.
#pragma once

#include <vector>

#include "dsl/node.h"
#include "runtime/cpu/library.h"
#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// op: MaxPool2D / AvgPool2D (inputs {x}), MaxPool2DGrad (inputs {x, dy}), AvgPool2DGrad ({dy}).
void pool2d(Op op, const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool);

}  // namespace towerjit::cpujit
