// The precision policy's pass for convolutions (PrecisionPolicy::conv_operands): every
// convolution of f32 operands, forward and both gradients, takes them rounded to bf16 (or f16)
// and widened back, so its products are exact and accumulate in f32, as cuDNN's and oneDNN's
// 16-bit convolutions compute; the result stays f32. The kernels stay the f32 ones (so the
// numbers are those of a 16-bit convolution, the speed is not): each rounding is a cast pair
// that lowering fuses into the kernel producing the operand, like half_matmuls.h's casts.
#pragma once

#include "dsl/dtype.h"
#include "jit/passes/rewrite.h"

namespace towerjit {

// `graph` with each Conv2D, Conv2DGradInput and Conv2DGradFilter of f32 operands rewritten to
// read cast(cast(operand, dtype), f32) (dtype bf16 or f16). Runs on the training graph after
// autodiff, so the backward convolutions are covered too.
Rewritten half_conv_operands(const Graph& graph, DType dtype);

}  // namespace towerjit
