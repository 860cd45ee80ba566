// Checks written from the cost model's own records (runtime/cost/recorded_step.h): a training
// step of the example's models on the emulated GPU, reporting an H200's 132 SMs, recorded launch
// by launch. They assert on launch shapes, counts and the model's ratio, never on timings. Each
// case sets the emulated GPU up itself, so it runs in a process of its own (as ctest runs it).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <map>

#include "bench/gpu_model.h"
#include "jit/cost/gpu_specs.h"
#include "jit/cost/launch_model.h"

namespace cost = towerjit::cost;
namespace bench = towerjit::bench;

TEST_CASE("cost records: every launch of a step is recorded with its shape, work and bytes") {
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  const bench::ModelledStep m = bench::record_workload(h, "mlp", 256);
  int kernels = 0, gemms = 0;
  double points = 0;
  for (const cost::Launch& l : m.launches) {
    INFO(l.module << "/" << l.name);
    if (l.kind == "kernel") {
      ++kernels;
      CHECK(l.blocks >= 1);
      CHECK(l.threads_per_block == 256);
      CHECK(l.bytes > 0);  // from the program's index, or the library kernel's shape
      CHECK(static_cast<double>(l.work_max) >= l.work_mean);
      CHECK(l.blocks <= int64_t{32} * h.sms);  // the runtime's cap, at the modelled SM count
      points += l.points();
    }
    if (l.kind == "library") {
      ++gemms;
      CHECK(l.flops == 2.0 * l.gemm_m * l.gemm_n * l.gemm_k * l.gemm_batch);
    }
  }
  // Three dense layers: three products forward, five backward (no data gradient of the input).
  CHECK(gemms == 8);
  CHECK(kernels >= 8);
  CHECK(points > 0);
  // The bias+ReLU kernel of fc1, [256, 512] elementwise in float4: 32768 vectors over 128
  // blocks, one a thread.
  bool found = false;
  for (const cost::Launch& l : m.launches)
    if (l.name.find("relu_add") != std::string::npos && l.module == "tower_step") {
      found = true;
      CHECK(l.blocks == 128);
      CHECK(l.work_max == 4);  // the 4 lanes of its float4
    }
  CHECK(found);
  // Grids the runtime caps at 32 blocks an SM go past what the emulator's default 4 SMs allow:
  // the apply's group kernel over the MLP's 0.67 M parameters runs on more than 128 blocks.
  int64_t widest = 0;
  for (const cost::Launch& l : m.launches) widest = std::max(widest, l.blocks);
  CHECK(widest > 4 * 32);
}

// The failing checks of issue 21 are in test_recorded_steps_goals.cpp.
