// The GPU cost model: turns the emulated GPU's launch records (emulator/driver/launch_log.h)
// into a predicted time per launch and per step on a named GPU (gpu_specs.h). It predicts; it
// does not measure. Every term is a closed form of the record and the GPU's figures:
//
//   a kernel of G blocks of T threads, B bytes, F FLOPs, whose busiest thread did W points:
//     per SM at once   r = min(32, 2048 / T, shared memory per SM / the block's)
//     waves            = ceil(G / (SMs * r))
//     bandwidth        t_mem  = ceil(G / SMs) * (B / G) / (BW / SMs)   (an SM moves its share
//                                 of the achievable bandwidth, no more: a grid of one block
//                                 gets 1/SMs of it)
//     compute          t_flop = ceil(G / SMs) * (F / G) / (peak / SMs)
//     latency          t_lat  = waves * ceil(W / 4) * DRAM latency   (a thread's points one
//                                 after another, 4 points' loads in flight at a time: NVRTC
//                                 unrolls the emitted loops by 4, kPointsInFlight)
//     tail             t_tail = (1 + ceil(W_tail / 4)) * DRAM latency, where the last block to
//                                 finish walked W_tail points after every other block (a
//                                 reduction's one-pass combine): its ticket's atomic, a round
//                                 trip to L2 taken as one DRAM latency (an upper figure), then
//                                 its walk; 0 without a tail
//     kernel           t = max(t_mem, t_flop, t_lat) + t_tail
//   a library matrix product of m x n x k, `batch` times (cuBLAS SGEMM; peak: FP32, TF32 with
//   --tf32, or the BF16 / FP16 tensor-core peak for bf16 or f16 operands, Launch::half_operands):
//     tile c = 128, or 64 or 32 where the smaller of m and n is under it (gemm_tile);
//     tiles = ceil(m / c) * ceil(n / c) * batch, each on an SM; fewer tiles than SMs split
//     k over s = min(floor(SMs / tiles), ceil(k / c)) slices (split-K), whose s partial
//     outputs are written and read back once;
//     t = max(ceil(tiles * s / SMs) * 2 * c * c * ceil(k / s) / (peak / SMs),
//             (B + 8 * s * m * n * batch [s > 1]) / BW)
//   a copy on the device: B / BW; across the host link: B / 2 / link bandwidth.
//   a step: the launches one after another (one stream), each plus the launch overhead (or a
//   graph node's when the step is replayed as a CUDA Graph).
//   the floor: device bytes / BW + FLOPs / peak (each launch's FLOPs at its own peak), no launch
//   costs at all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jit/cost/gpu_specs.h"

namespace towerjit::cost {

// One launch record, as the emulator writes it, with bytes and FLOPs filled in.
struct Launch {
  std::string kind = "kernel";  // "kernel", "library", "copy"
  std::string name, module;
  int64_t blocks = 0, threads_per_block = 0;  // 0 for library calls and copies
  int64_t shared_bytes = 0;                   // static + dynamic, per block
  uint64_t work_max = 0;                      // the busiest thread's points
  double work_mean = 0;
  uint64_t tail_work_max = 0;                 // the same for the grid's tail (the last block's walk)
  double tail_points = 0;                     // every thread's tail work, summed
  double bytes = 0, flops = 0;
  int64_t gemm_m = 0, gemm_n = 0, gemm_k = 0, gemm_batch = 0;  // library matrix products
  bool half_operands = false;  // a product of bf16 or f16 operands: priced at the BF16 / FP16 peak
  bool host_link = false;                     // copies between host and device
  bool graph = false;                         // replayed as a CUDA graph's node
  // Kernels: whether the kernel reduces (the program's index says).
  bool reduces = false;
  // The points the grid computed: every thread's work, summed.
  double points() const { return work_mean * static_cast<double>(blocks * threads_per_block); }
};

struct LaunchPrediction {
  double us = 0;                             // the launch's own time, overhead excluded
  double mem_us = 0, flop_us = 0, latency_us = 0;  // the terms it is the largest of
  double tail_us = 0;                        // added after them: the grid's tail
  int64_t waves = 0, blocks_per_sm = 0;
  std::string bound;                         // "bandwidth", "compute", "latency", "host link"
};

struct StepPrediction {
  std::vector<LaunchPrediction> launches;  // as the records, in order
  double device_us = 0;      // kernels, library calls and device copies, with their overheads
  double host_link_us = 0;   // host <-> device copies, with their overheads
  double overhead_us = 0;    // of device_us: launch overheads (or graph nodes)
  double floor_us = 0;       // device bytes / BW + FLOPs / peak
  double bytes = 0, flops = 0;
  int64_t launches_count = 0;
  double ratio() const { return floor_us > 0 ? device_us / floor_us : 0; }
};

struct ModelOptions {
  // Every launch priced as a CUDA graph's node (graph_node_us), as if the whole step were one
  // graph; otherwise only those recorded as replayed (Launch::graph) are.
  bool graph = false;
  bool tf32 = false;   // matrix products at the TF32 peak
};

// The points a thread has in flight at once: NVRTC unrolls the emitted grid-stride and
// reduction loops by 4 and issues the 4 iterations' loads together (seen in the PTX of the
// tower step's column reductions, e.g. k5_sum_constant_greater_select of the MLP).
inline constexpr double kPointsInFlight = 4;

// The output tile of one SGEMM block for an m x n product: the GPU's (128), halved down to 32
// while the smaller of m and n is under it, as cuBLAS's kernels for thin products have.
int gemm_tile(const GpuSpec& gpu, int64_t m, int64_t n);

// Blocks of `threads` threads and `shared` bytes of shared memory that one SM holds at once
// (at least 1).
int64_t blocks_per_sm(const GpuSpec& gpu, int64_t threads, int64_t shared);

LaunchPrediction predict_launch(const GpuSpec& gpu, const Launch& l, const ModelOptions& options = {});

StepPrediction predict_step(const GpuSpec& gpu, const std::vector<Launch>& launches, const ModelOptions& options = {});

}  // namespace towerjit::cost
