// Named GPUs for the cost model (launch_model.h): the figures a prediction needs, each with its
// source (docs/performance.md, "The GPU cost model", lists them). A GPU is one entry of the
// table in gpu_specs.cpp; adding one is adding an entry.
#pragma once

#include <string>
#include <vector>

namespace towerjit::cost {

struct GpuSpec {
  std::string name;         // "h200"
  std::string description;  // "NVIDIA H200 SXM 141 GB"
  int sms = 0;
  double clock_ghz = 0;              // boost clock
  double hbm_peak_gbps = 0;          // datasheet, GB/s (1e9 bytes)
  double hbm_achievable_gbps = 0;    // what a streaming kernel reaches
  // Dense, no sparsity. bf16_tflops: the tensor cores' BF16 peak, which is their FP16 peak too
  // (with f32 accumulation) on every GPU of the table.
  double fp32_tflops = 0, tf32_tflops = 0, bf16_tflops = 0;
  double dram_latency_ns = 0;        // a load that misses the caches
  double host_link_gbps = 0;         // PCIe, one direction, achievable
  double launch_overhead_us = 0;     // a kernel or copy launched on a stream, back to back
  double graph_node_us = 0;          // a node of a replayed CUDA Graph
  int max_threads_per_sm = 2048, max_blocks_per_sm = 32;
  int shared_bytes_per_sm = 0;
  int gemm_tile = 128;               // the output tile of one SGEMM thread block (m and n)
  std::string sources;               // where each figure comes from
};

// The table's GPUs, in order.
const std::vector<GpuSpec>& gpu_specs();

// The GPU named `name` (case-insensitive: "h200", "a100"). Throws towerjit::Error naming the
// GPUs the table has.
const GpuSpec& gpu_spec(const std::string& name);

}  // namespace towerjit::cost
