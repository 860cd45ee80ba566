// Reduction finishers: the elementwise kernel that follows a reduction over that reduction's
// output points (batch norm's per-channel kernel after its sums: rsqrt, scale, the moving
// statistics) runs inside the reduction instead, at each output point, by the thread that has
// just stored the results there. One launch fewer a batch norm on a GPU, where such a kernel
// of 16 to 512 points is all launch (docs/cuda.md#reductions-the-whole-gpu-in-a-fixed-order).
//
// The GPU's programs take it (lower_graph_for_gpu, jit/passes/pipeline.h); the CPU's do not: there a
// reduction's results come from its chunks' partials combined after the pool's threads join,
// and a kernel of a few points costs a call, not a launch.
#pragma once

#include "jit/kir/kernel_ir.h"

namespace towerjit {

// The most output points a reduction finishes itself: a finisher runs on one thread of each
// output's warp, so a large one would run on a thirty-second of the threads a kernel of its
// own has; batch norm's have one point a channel.
inline constexpr int64_t kMaxFinisherPoints = 4096;

// A kernel step joins the reduction step just before it as its finishers (each part of a
// group, or the kernel itself) when:
// - the reduction is a plain one (not a group) over a fixed number of output points, at most
//   kMaxFinisherPoints, and has no finishers yet;
// - every body is elementwise and loops over those output points in their order (axes of
//   extent 1 aside);
// - it reads what the reduction writes only as a reduction's result at its own point, so what
//   it reads there is what its thread just stored;
// - it writes nothing the reduction reads or writes (other blocks may still be reducing).
kir::Program attach_reduction_finishers(kir::Program program);

}  // namespace towerjit
