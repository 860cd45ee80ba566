// Max pools computed by the convolution that makes their input, and their gradients routed by
// the window's winner (the CPU's programs; the GPU's take jit/passes/fused_max_pools.h).
//
// A conv -> bias -> ReLU -> 2x2 max pool layer (the cnn's two layers) cost three passes over
// the convolution's result, the largest tensor of its layer: the convolution stored it, the
// pool read it, and the pool's gradient read it again to find each window's first maximum. The
// cnn's first layer's result is 6.4 MB at batch 128, written and read at the memory's rate
// whatever the kernels do (its forward took 0.3 ms for 29 MFLOP). Here:
// 1. the convolution pools each image's result while it is in cache (runtime/cpu/conv_epilogue.h):
//    it stores the pooled values and a code of each window's winner (a quarter and a
//    sixteenth of the result's size), and never the result;
// 2. the pool's gradients read the codes in place of the result (runtime/cpu/pool.h);
// 3. where every reader of such a gradient dx is a gradient of a convolution taking dx as its dy
//    or a sum of dx alone (the layer's bias gradient), dx is never stored either: each
//    convolution gradient reads the pooled dy and the codes and routes each image as it reads
//    it, into the layout its kernels read (runtime/cpu/conv_images.h, pool.h), and the sum
//    becomes one over the pooled points of what each window routes (dy, or with a ReLU's mask
//    dy where the code is below 4: where the pooled value is > 0). In the cnn that is the 6.4 MB
//    dx of its first layer and the 3.2 MB of its second, stored once and read two and three
//    times each.
//
// The code, as the GPU pass's: the window position of the first maximum in row-major window
// order (0 to 3), plus 4 where that maximum is not > 0 (NaN included). It is a byte a pooled
// point, four to an i32 element (kir::pool_code_words): the cnn's first layer writes its codes
// (0.4 MB at batch 128) and reads them back at the copy bandwidth, where i32 codes were as
// large as the pooled values (1.6 MB). A
// gradient that carries a ReLU's mask (jit/passes/mask_pool_grads.h) routes dy only to a code
// below 4, whose input there was > 0; one without to position code & 3.
//
// The same bits as the library routines they replace: the pooled value is the routine's
// maximum of the window's four values (NaN winning), the winner the routine's first maximum (a
// later point wins where it is greater, or is a NaN where the best is not), the gradient dy at
// the winner and +0 elsewhere. The sum of 3. adds the same nonzero terms in another order: its
// result is within the sum's error bound of the old one, not the same bits.
//
// Taken where all of these hold, and the program left as it was elsewhere:
// - a Conv2D call's f32 result [N, C, H, W] of even H and W is a temporary, no view of anything
//   and viewed by nothing, not fetched, written by that call alone;
// - its readers are one MaxPool2D call (2x2, stride 2, no padding, f32) and MaxPool2DGrad calls
//   of the same window taking it as their input;
// - nothing between the convolution and the pool touches the pool's output, which the
//   convolution now writes at its own step.
// Routed (3.) where dx is f32, a temporary, not fetched or viewed, and each reader is a
// Conv2DGradInput or Conv2DGradFilter taking it as dy (and nothing else), or a kernel that is
// only sum(dx) over axes that include H and W; nothing before the last reader writes the pooled
// dy, or (with a ReLU's mask) the pooled values.
// TOWERJIT_FUSED_MAX_POOLS=off keeps the library routines (the same bits).
#pragma once

#include "jit/kir/kernel_ir.h"

namespace towerjit {

kir::Program pool_convolutions(kir::Program program);

}  // namespace towerjit
