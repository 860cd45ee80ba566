// Max pools computed by the kernel that makes their input, and their gradients routed by the
// window's winner inside the kernels that read them (the GPU's programs only).
//
// A 2x2, stride-2 max pool after an elementwise kernel (the resnet's relu(bn(x) + shortcut))
// cost three passes over the pool's input x, among the largest tensors of the step: the kernel
// stored x, the pool read it, and the pool's gradient read it again to find each window's first
// maximum, then stored dx for batch norm's backward to read three times. Here:
// 1. the kernel loops over the pooled points instead, computes x at a window's four points and
//    stores the maximum and a code of where it was; x is never stored;
// 2. the gradient is a loop kernel over [N, C, H/2, 2, W/2, 2] (x's own order) that gives dy to
//    the position the code names;
// 3. each kernel that reads dx takes that kernel's body where it loaded dx, its loop split the
//    same way (a sum over N, H, W becomes one over N, H/2, 2, W/2, 2: the same points in the
//    same order), so dx is never stored either. Where one cannot, the gradient keeps its launch.
// At batch 512 the kernels around the resnet's first pool (its producer, the pool, its gradient
// and dx's three readers) moved 398.2 MB that way and 256.9 MB this way, in two launches fewer.
//
// The code, an i32 a pooled point: the window position of the first maximum in row-major window
// order (0 to 3), plus 4 where that maximum is not > 0 (NaN included). A gradient that carries a
// ReLU's mask (jit/passes/mask_pool_grads.h) routes dy only to positions 0 to 3, whose input
// there was > 0; one without takes position p from code p or p + 4.
//
// The same values, bit for bit, as the library routines (jit/cuda/device/library_kernels.cu,
// tj_window_argmax): a later point of the window wins only where it is greater than the best so
// far, or is a NaN where the best is not; the pool is that point's value; the gradient is
// 0 + dy at the winner (+0 for a dy of -0, as the routine's sum) and +0 elsewhere.
//
// Taken where all of these hold, and the program left as it was elsewhere:
// - the pool is 2x2 with stride 2 and no padding over an [N, C, H, W] of even H and W, in f32
//   or in the precision policy's 16 bits (then the producer's value is its cast to them, which
//   is what the routine compares, and dx = 0 + dy is exact in them);
// - its input is a temporary, no view of anything and viewed by nothing, not fetched, stored
//   row-major by one kernel that is elementwise and ungrouped, whose only output it is (so this
//   runs before group_kernels), and that uses no loop index as a value;
// - nothing else reads it but the pool and max_pool2d_grad calls, all of its dtype;
// - nothing between the producer and the pool touches the pool's output.
// Routed into a reader where dx is not fetched or viewed, and the reader is an ungrouped kernel
// over dx's shape (or already split for another pool of that shape), loads dx row-major, uses no
// index of H or W as a value and writes nothing the gradient reads, which nothing rewrites before
// the last reader. TOWERJIT_FUSED_MAX_POOLS=off keeps the library routines (the same bits).
// The CPU's programs do not take this pass: there a window's two columns would be strided loads
// in loops vectorised along W, and a split reader's innermost loop 2 points long. They take a
// pool into the convolution that makes its input instead (jit/passes/conv_pools.h).
#pragma once

#include "jit/kir/kernel_ir.h"

namespace towerjit {

kir::Program fuse_max_pools(kir::Program program);

}  // namespace towerjit
