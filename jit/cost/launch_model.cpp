#include "jit/cost/launch_model.h"

#include <algorithm>
#include <cmath>

namespace towerjit::cost {
namespace {

double ceil_div(double a, double b) { return std::ceil(a / b); }

// The time of `total` units spread evenly over `blocks` blocks on an SM-count GPU whose whole
// rate is `rate` (units per us): the busiest SM runs ceil(blocks / SMs) blocks at its share.
double tail_time(const GpuSpec& gpu, double total, double blocks, double rate) {
  if (total <= 0 || rate <= 0) return 0;
  blocks = std::max(1.0, blocks);
  return ceil_div(blocks, gpu.sms) * (total / blocks) / (rate / gpu.sms);
}

double bandwidth_per_us(const GpuSpec& gpu) { return gpu.hbm_achievable_gbps * 1e3; }  // bytes per us
// The peak a launch's FLOPs run at: a product of bf16 or f16 operands on the tensor cores' BF16
// / FP16 peak (the same figure on the GPUs of gpu_specs.h), else FP32, or TF32 with --tf32.
double matmul_flops_per_us(const GpuSpec& gpu, const ModelOptions& o, const Launch& l) {
  if (l.half_operands) return gpu.bf16_tflops * 1e6;
  return (o.tf32 ? gpu.tf32_tflops : gpu.fp32_tflops) * 1e6;
}

}  // namespace

int gemm_tile(const GpuSpec& gpu, int64_t m, int64_t n) {
  int t = gpu.gemm_tile;
  while (t > 32 && std::min(m, n) < t) t /= 2;
  return t;
}

int64_t blocks_per_sm(const GpuSpec& gpu, int64_t threads, int64_t shared) {
  int64_t r = gpu.max_blocks_per_sm;
  if (threads > 0) r = std::min<int64_t>(r, gpu.max_threads_per_sm / threads);
  if (shared > 0) r = std::min<int64_t>(r, gpu.shared_bytes_per_sm / shared);
  return std::max<int64_t>(1, r);
}

LaunchPrediction predict_launch(const GpuSpec& gpu, const Launch& l, const ModelOptions& o) {
  LaunchPrediction p;
  if (l.kind == "copy") {
    if (l.host_link) {
      p.mem_us = l.bytes / 2 / (gpu.host_link_gbps * 1e3);  // `bytes` counts both ends
      p.bound = "host link";
    } else {
      p.mem_us = l.bytes / bandwidth_per_us(gpu);
      p.bound = "bandwidth";
    }
    p.us = p.mem_us;
    return p;
  }
  if (l.kind == "library" && l.gemm_batch > 0) {
    const double t = gemm_tile(gpu, l.gemm_m, l.gemm_n);
    const double tiles = ceil_div(static_cast<double>(l.gemm_m), t) * ceil_div(static_cast<double>(l.gemm_n), t) *
                         static_cast<double>(l.gemm_batch);
    // Split-K: an output of fewer tiles than SMs has its k split over the idle SMs, slices
    // of at least one tile's depth, the partial tiles summed by a second pass.
    const double split = std::clamp(std::floor(gpu.sms / tiles), 1.0,
                                    std::max(1.0, ceil_div(static_cast<double>(l.gemm_k), t)));
    const double slice_flops = 2.0 * t * t * std::ceil(static_cast<double>(l.gemm_k) / split);
    p.flop_us = tail_time(gpu, tiles * split * slice_flops, tiles * split, matmul_flops_per_us(gpu, o, l));
    const double partials = split > 1 ? 2.0 * 4 * split * static_cast<double>(l.gemm_m * l.gemm_n * l.gemm_batch) : 0;
    p.mem_us = (l.bytes + partials) / bandwidth_per_us(gpu);
    p.waves = static_cast<int64_t>(ceil_div(tiles * split, gpu.sms));
    p.blocks_per_sm = 1;
  } else if (l.kind == "library") {  // another library routine: the roofline, on the whole GPU
    p.flop_us = l.flops / matmul_flops_per_us(gpu, o, l);
    p.mem_us = l.bytes / bandwidth_per_us(gpu);
  } else {
    const double blocks = static_cast<double>(std::max<int64_t>(1, l.blocks));
    p.blocks_per_sm = blocks_per_sm(gpu, l.threads_per_block, l.shared_bytes);
    p.waves = static_cast<int64_t>(ceil_div(blocks, static_cast<double>(gpu.sms * p.blocks_per_sm)));
    p.mem_us = tail_time(gpu, l.bytes, blocks, bandwidth_per_us(gpu));
    p.flop_us = tail_time(gpu, l.flops, blocks, gpu.fp32_tflops * 1e6);
    p.latency_us = static_cast<double>(p.waves) * std::ceil(static_cast<double>(l.work_max) / kPointsInFlight) *
                   gpu.dram_latency_ns * 1e-3;
    if (l.tail_work_max > 0)  // the ticket's round trip, then the last block's walk, after the rest
      p.tail_us = (1 + std::ceil(static_cast<double>(l.tail_work_max) / kPointsInFlight)) * gpu.dram_latency_ns * 1e-3;
  }
  p.us = std::max({p.mem_us, p.flop_us, p.latency_us}) + p.tail_us;
  p.bound = p.us == p.mem_us ? "bandwidth" : p.us == p.flop_us ? "compute" : "latency";
  return p;
}

StepPrediction predict_step(const GpuSpec& gpu, const std::vector<Launch>& launches, const ModelOptions& o) {
  StepPrediction s;
  double flop_floor_us = 0;
  for (const Launch& l : launches) {
    const double overhead = o.graph || l.graph ? gpu.graph_node_us : gpu.launch_overhead_us;
    LaunchPrediction p = predict_launch(gpu, l, o);
    if (l.kind == "copy" && l.host_link) {
      s.host_link_us += p.us + overhead;
    } else {
      s.device_us += p.us + overhead;
      s.overhead_us += overhead;
      s.bytes += l.bytes;
      s.flops += l.flops;
      flop_floor_us += l.flops / matmul_flops_per_us(gpu, o, l);
    }
    s.launches.push_back(std::move(p));
  }
  s.launches_count = static_cast<int64_t>(launches.size());
  s.floor_us = s.bytes / bandwidth_per_us(gpu) + flop_floor_us;
  return s;
}

}  // namespace towerjit::cost
