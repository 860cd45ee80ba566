// EmittedKernel::launch: the grid of every loop kernel, and for reductions the split rule.
//
// A reduction's natural grid is one unit per output (a warp or a block per row, a block per
// 32 columns). When that is less than one full wave of the GPU and the kernel is large enough
// to pay for a second launch, the reduced points are split so the grid covers about two waves.
// Every number below is a function of the bound shape and the SM count alone: the same device
// always splits, and so sums, in the same order. The assumptions, and where they come from:
//   - 8 resident blocks of 256 threads per SM: 2048 resident threads per SM on sm_80 and sm_90
//     (CUDA C++ Programming Guide, "Compute Capabilities", table of technical specifications);
//   - two waves rather than one: a block that runs long, or an SM holding fewer blocks (a
//     kernel with many registers), evens out in the second wave, and the partials stay few;
//   - no split below 16384 points (64 KiB of f32): one block reads that in a few microseconds,
//     about what the combine kernel's launch costs (a launch is a few microseconds on the
//     driver API, less in a CUDA Graph), unless a thread would walk more than 8 points one
//     after another: the loads of a walk are in flight 4 at a time (NVRTC unrolls the loop by
//     4, jit/cost/launch_model.h), each round a DRAM latency (~0.5 us on H100 and H200, Chips
//     and Cheese 2023), so 64 points (the logits' bias gradient at batch 512: 10 columns) are
//     8 us against a replayed combine's ~1 us; such a walk splits only as far as 8 points;
//   - every thread of a unit has at least one reduced point of its split;
//   - a split reduction folds its partials in its own last block (one pass) instead of a
//     combine kernel where that tail is no slower: the block's 8 warps share the outputs, each
//     walking an output's partials as a combine kernel's warp would (ceil(splits / 32) a lane),
//     so one pass is taken where ceil(outputs / 8) such walks, one after another, take no more
//     rounds of 4 loads in flight than one walk does; the last block's ticket (a round trip to
//     L2 and back) then stands against the combine kernel's launch (a graph node, 0.5 us, about
//     a DRAM latency: jit/cost/gpu_specs.cpp). A full sum or a few outputs qualify; batch-norm
//     statistics over 16 channels in 132 pieces (two outputs a warp, 10 partials against 5)
//     do not.
//     TOWERJIT_ONE_PASS_REDUCTIONS=off keeps it everywhere; the sums are the same either way.
// With these, a reduction over >= 65536 points runs on at least points / 256 >= 256 blocks
// (see the proof in docs/cuda.md), more than any current GPU's SM count.
#include <algorithm>

#include "jit/cuda/cuda_emitter.h"
#include "jit/knobs.h"

namespace towerjit::cuda {
namespace {

constexpr int64_t kBlocksPerSm = 8;         // resident 256-thread blocks per SM
constexpr int64_t kWaves = 2;               // the split grid's target, in full waves
constexpr int64_t kSplitMinPoints = 16384;  // smaller reductions split only for a long walk
constexpr int64_t kMaxWalk = 8;             // a thread's reduced points, one after another
constexpr int64_t kMaxBlocksPerSm = 32;     // grid-stride kernels: at most 4 waves of blocks
constexpr int64_t kLoadsInFlight = 4;       // a thread's loads issued together (launch_model.h)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool EmittedKernel::may_split() const {
  return is_reduction() && (points.b != 0 || points.c >= kSplitMinPoints);
}

Launch EmittedKernel::launch(int64_t batch, int sm_count) const {
  using S = Scheme;
  const int64_t sms = std::max(1, sm_count), cap = kMaxBlocksPerSm * sms;
  Launch l;
  if (scheme == S::elementwise) {
    l.grid = std::clamp<int64_t>(ceil_div(points.at(batch), int64_t{block} * vector_width), 1, cap);
    return l;
  }
  const int64_t n = outputs.at(batch), len = reduced.at(batch), pts = points.at(batch);
  // A unit: what one output's piece runs on. units_per_block of them share a block; `lanes`
  // threads of a unit walk its reduced points.
  const int64_t units = scheme == S::column ? ceil_div(n, 32) : n;
  const int64_t per_block = scheme == S::row_per_warp ? block / 32 : 1;
  const int64_t lanes = scheme == S::row_per_warp ? 32 : scheme == S::column ? block / 32 : block;
  int64_t splits = 1;
  const int64_t walk = ceil_div(len, lanes);
  const bool large = pts >= kSplitMinPoints, long_walk = walk > kMaxWalk;
  if (may_split() && (large || long_walk) && ceil_div(units, per_block) < kBlocksPerSm * sms) {
    int64_t want = ceil_div(kWaves * kBlocksPerSm * sms * per_block, std::max<int64_t>(units, 1));
    if (!large) want = std::min(want, ceil_div(walk, kMaxWalk));
    splits = std::clamp<int64_t>(std::min(want, walk), 1, std::max<int64_t>(len, 1));
  }
  // Equal pieces of `chunk` points; recounting from chunk leaves no piece empty.
  l.chunk = std::max<int64_t>(1, ceil_div(len, splits));
  l.splits = std::max<int64_t>(1, ceil_div(len, l.chunk));
  l.grid = std::clamp<int64_t>(ceil_div(units * l.splits, per_block), 1, cap);
  if (l.splits > 1) {
    const int64_t walk = ceil_div(l.splits, 32), tail = ceil_div(n, block / 32) * walk;
    l.one_pass = ceil_div(tail, kLoadsInFlight) <= ceil_div(walk, kLoadsInFlight) && knobs::one_pass_reductions();
    if (!l.one_pass) l.combine_grid = std::clamp<int64_t>(ceil_div(n * 32, block), 1, cap);  // a warp per output
    l.partials_bytes = l.splits * n * partial_bytes;
  }
  return l;
}

}  // namespace towerjit::cuda
