// Convolutions of bf16 / f16 operands on the CPU (the precision policy's, jit/passes/
// half_convolutions.h): the operands widened to f32 (exactly), the f32 convolution of conv.h,
// and its result rounded to the operands' dtype (nearest, ties to even), as cuDNN's 16-bit
// configurations store it. So the result is bitwise the f32 convolution of the rounded
// operands, rounded once. The direct kernels widen and round an image at a time in cache
// (conv_images.h); the im2col path (the baseline level, a strided input gradient) widens the
// operands whole and rounds the result whole, two passes more than f32.
#pragma once

#include "dsl/node.h"
#include "runtime/cpu/library.h"
#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// `op` Conv2D (a = x, b = w), Conv2DGradInput (a = dy, b = w) or Conv2DGradFilter (a = x,
// b = dy); a, b and out all of one 16-bit dtype.
void half_convolution(Op op, const Attrs& at, const View& a, const View& b, const View& out, ThreadPool* pool);

}  // namespace towerjit::cpujit
