// The precision policy's pass for convolutions (PrecisionPolicy::conv_operands): every
// convolution of f32 operands, forward and both gradients, takes them rounded to bf16 (or f16)
// and gives its result in that dtype, widened back to f32 for its readers. This is the
// contract of cuDNN's 16-bit convolutions (the legacy API's PSEUDO_BFLOAT16 and PSEUDO_HALF
// configurations: x, w and y of the 16-bit type, the products exact and summed in f32, the
// sum rounded once on store) and what torch.autocast gives for conv2d. Each rounding of an
// operand is a cast that lowering fuses into the kernel producing it, and the widening into the
// kernels reading the result, so the operands and results move 2 bytes an element.
//
// Max pooling and its gradient go the same way, so the feature maps between convolutions move
// 2 bytes an element too (torch.autocast keeps them in the autocast dtype): rounding is
// monotonic, so a max pool of rounded values is the rounded max pool, the same numbers as
// rounding its result for the next convolution; its gradient routes each rounded dy to its
// window's first largest element (a tie among values that only rounding made equal goes to the
// first), summed in f32 and rounded once where windows overlap.
#pragma once

#include "dsl/dtype.h"
#include "jit/passes/rewrite.h"

namespace towerjit {

// `graph` with each Conv2D, Conv2DGradInput, Conv2DGradFilter, MaxPool2D and MaxPool2DGrad of
// f32 operands rewritten to cast(op(cast(a, dtype), ...) of dtype, f32) (dtype bf16 or f16).
// Runs on the training graph after autodiff, so the backward ops are covered too.
Rewritten half_conv_operands(const Graph& graph, DType dtype);

}  // namespace towerjit
