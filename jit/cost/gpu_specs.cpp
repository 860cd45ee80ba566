#include "jit/cost/gpu_specs.h"

#include <algorithm>
#include <cctype>

#include "dsl/error.h"

namespace towerjit::cost {

const std::vector<GpuSpec>& gpu_specs() {
  static const std::vector<GpuSpec> table = [] {
    std::vector<GpuSpec> t;
    GpuSpec h200;
    h200.name = "h200";
    h200.description = "NVIDIA H200 SXM 141 GB";
    h200.sms = 132;
    h200.clock_ghz = 1.98;
    h200.hbm_peak_gbps = 4800;
    h200.hbm_achievable_gbps = 4300;
    h200.fp32_tflops = 67;
    h200.tf32_tflops = 494.7;
    h200.bf16_tflops = 989.4;
    h200.dram_latency_ns = 500;
    h200.host_link_gbps = 55;
    h200.launch_overhead_us = 2.0;
    h200.graph_node_us = 0.5;
    h200.shared_bytes_per_sm = 228 * 1024;
    h200.sources =
        "SMs, clock, FP32/TF32/BF16 peaks: NVIDIA H100/H200 datasheets and the Hopper whitepaper (H200 is the "
        "GH100 of H100 SXM5 with HBM3e); HBM 4.8 TB/s: H200 datasheet; achievable 4.3 TB/s: about 90% of peak, "
        "as streaming copies reach on HBM GPUs (the estimate of issue 21); DRAM latency ~0.5 us: Chips and Cheese, "
        "\"Nvidia's H100: Funny L2, and Tons of Bandwidth\" (2023); host link: PCIe 5.0 x16, 64 GB/s raw, ~55 "
        "achievable; launch and graph-node overheads: NVIDIA, \"Getting Started with CUDA Graphs\" (2019)";
    t.push_back(h200);
    GpuSpec a100;
    a100.name = "a100";
    a100.description = "NVIDIA A100 SXM4 80 GB";
    a100.sms = 108;
    a100.clock_ghz = 1.41;
    a100.hbm_peak_gbps = 2039;
    a100.hbm_achievable_gbps = 1800;
    a100.fp32_tflops = 19.5;
    a100.tf32_tflops = 156;
    a100.bf16_tflops = 312;
    a100.dram_latency_ns = 500;
    a100.host_link_gbps = 25;
    a100.launch_overhead_us = 2.0;
    a100.graph_node_us = 0.5;
    a100.shared_bytes_per_sm = 164 * 1024;
    a100.sources =
        "SMs, clock, peaks, 2039 GB/s: NVIDIA A100 datasheet and Ampere whitepaper; achievable 1.8 TB/s: about "
        "90% of peak as on H200; DRAM latency ~0.5 us: Chips and Cheese (A100 beside H100, 2023); host link: "
        "PCIe 4.0 x16, 32 GB/s raw, ~25 achievable; overheads as H200 (NVIDIA's CUDA Graphs post)";
    t.push_back(a100);
    return t;
  }();
  return table;
}

const GpuSpec& gpu_spec(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string names;
  for (const GpuSpec& g : gpu_specs()) {
    if (g.name == lower) return g;
    names += (names.empty() ? "" : ", ") + g.name;
  }
  throw Error("towerjit: no GPU named \"" + name + "\" in the cost model's table; use one of " + names +
              " (or add an entry to jit/cost/gpu_specs.cpp)");
}

}  // namespace towerjit::cost
