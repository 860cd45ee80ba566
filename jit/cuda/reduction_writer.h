// The reduction kernels of the CUDA emitter: how a kernel whose loop space has reduced axes
// maps onto threads, split across blocks in a fixed order (never atomics). Internal to jit/cuda.
//
//   - reduced axes innermost (a row, or NCHW's N,H,W around a kept C): a warp (rows of at
//     most 1024 points) or a block per output and split, threads along the reduced points;
//   - a kept axis innermost (a bias gradient over [B, C]): a block per 32 outputs and split,
//     8 slices of the split's points each, combined in slice order through shared memory.
//
// Pass 1 is the kernel itself. When EmittedKernel::launch splits the reduced points, pass 1
// writes partials [split][output] to the runtime's workspace and the combine kernel (pass 2)
// folds each output's partials in split order and applies the result (a mean's division, a
// log-sum-exp's m + log s). Side outputs are stored once, in pass 1. For a few outputs the
// launch is one pass instead: the last block to finish (a ticket, the one atomic) folds the
// partials in the same order, so the bits are the two passes'.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "jit/cuda/kernel_writer.h"

namespace towerjit::cuda::detail {

// Chooses the scheme and fills info.scheme, outputs, reduced, shared_bytes, partial_bytes and
// combine_symbol. Call before writing the kernel.
void plan_reduction(const KernelWriter& w, EmittedKernel& info);

// `struct <kernel>_partial { ... };`: one output's partial of one split, every sibling's.
void emit_partial_struct(std::ostream& out, const KernelWriter& w);

// The writers of a reduction's finishers (kir::Kernel::finishers), sharing its parameters.
using Finishers = std::vector<KernelWriter>;

// The body of pass 1 (inside the kernel's braces). Where one pass stores the results (one
// split, or the one-pass tail), the finishers run there.
void emit_reduction_body(std::ostream& out, const KernelWriter& w, const Finishers& fs, EmittedKernel& info);

// The whole pass-2 kernel, `<kernel>_combine`, with the kernel's parameter list; the finishers
// run after each output's result is stored.
void emit_combine_kernel(std::ostream& out, const KernelWriter& w, const Finishers& fs, const EmittedKernel& info,
                         const std::string& params);

// ", void* __restrict__ tj_partials, tj_i64 chunk": what a reduction adds to its parameters.
const char* reduction_params();

}  // namespace towerjit::cuda::detail
