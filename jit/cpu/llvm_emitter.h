// Kernel IR -> LLVM IR text for the CPU backend. The text is what gets compiled, cached and
// dumped (`.ll`), so it is written to be read: one function per kernel, named after it.
#pragma once

#include <string>
#include <vector>

#include "jit/kir/kernel_ir.h"

namespace towerjit::cpujit {

// How the runtime calls an emitted kernel:
//   void name(ptr* buffers, i64 batch, i64 begin, i64 end, i64 step)
// `buffers` holds the base address of each of `EmittedKernel::buffers`, in that order. The
// kernel covers [begin, end) of loop axis `split_axis` and all of the others, so threads may
// split that axis; with no split axis (a full reduction) the runtime calls it once with
// begin = 0, end = 1. `step` keys random numbers.
struct EmittedKernel {
  std::string symbol;
  std::vector<int> buffers;  // program buffer ids
  int split_axis = -1;  // the loop axis [begin, end) ranges over; -1: none
  // The loop space as emitted: the kernel's, with the axes that every access walks as one
  // merged (jit/passes/coalesce_axes.h); split_axis indexes it. Empty for a group kernel.
  Shape space;
  // A group kernel (kir::Kernel::parts): [begin, end) ranges over the parts' concatenated
  // points, `points` of them in all, and threads may split it anywhere.
  bool flat = false;
  kir::Affine points;
};

// One module holding every kernel of the program (one optimiser run, one cache entry).
std::string emit_llvm_module(const kir::Program& program, std::vector<EmittedKernel>* kernels);

}  // namespace towerjit::cpujit
