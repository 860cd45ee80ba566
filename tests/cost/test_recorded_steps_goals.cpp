// Issue 21's goals as checks from the cost model's records (bench/gpu_model.h). Each prints the
// figures it judged. The goal not met yet is tagged [.goal]: left out of `make test`, run with
// `build/tests/towerjit_tests "[goal]"`; docs/performance.md gives its figures today.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>

#include "bench/gpu_model.h"
#include "jit/cost/gpu_specs.h"
#include "jit/cost/launch_model.h"
#include "tests/jit/cpu_test_env.h"

namespace cost = towerjit::cost;
namespace bench = towerjit::bench;

namespace {

// Kernels that reduce over at least 64k points on fewer blocks than the GPU has SMs.
int narrow_reductions(const cost::GpuSpec& gpu, const bench::ModelledStep& m) {
  int narrow = 0;
  for (const cost::Launch& l : m.launches)
    if (l.kind == "kernel" && l.reduces && l.points() >= 65536 && l.blocks < gpu.sms) {
      std::printf("%s b%lld: %s/%s reduces %.0f points on %lld blocks (%d SMs)\n", m.workload.c_str(),
                  static_cast<long long>(m.batch), l.module.c_str(), l.name.c_str(), l.points(),
                  static_cast<long long>(l.blocks), gpu.sms);
      ++narrow;
    }
  return narrow;
}

}  // namespace

TEST_CASE("cost goals: no reduction over 64k points or more runs on fewer blocks than the GPU has SMs") {
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  // Batches where such reductions exist: the MLP's bias gradients over [256, 512]; the cnn's
  // first convolution's bias gradient over [8, 16, 28, 28] (100k points).
  CHECK(narrow_reductions(h, bench::record_workload(h, "mlp", 256)) == 0);
  CHECK(narrow_reductions(h, bench::record_workload(h, "cnn", 8)) == 0);
}

namespace {

// The cnn's and the resnet's steps at batches 4 and 8: (launches at 4, launches at 8, layers).
// Without cuDNN the implicit-GEMM filter gradient adds tj_sum_slices where its depth (images x
// pixels) is cut into slices, which depends on the batch; it is left out of the counts there.
struct LaunchCounts {
  size_t small = 0, larger = 0;
  int layers = 0;
};
size_t launches_but_slice_sums(const bench::ModelledStep& m) {
  size_t n = 0;
  for (const cost::Launch& l : m.launches) n += l.name != "tj_sum_slices";
  return n;
}
LaunchCounts launch_counts(const char* workload) {
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  const bench::ModelledStep small = bench::record_workload(h, workload, 4);
  const bench::ModelledStep larger = bench::record_workload(h, workload, 8);
  std::printf("%s: %zu launches at batch 4, %zu at batch 8, %d layers\n", workload, small.launches.size(),
              larger.launches.size(), larger.layers);
  return {launches_but_slice_sums(small), launches_but_slice_sums(larger), larger.layers};
}

}  // namespace

TEST_CASE("cost goals: the cnn and resnet steps launch as much at any batch (no launch per image)") {
  for (const char* cudnn : {"on", "off"}) {  // cuDNN's convolutions, then towerjit's implicit GEMMs
    towerjit::test::ScopedEnv use("TOWERJIT_CUDNN", cudnn);
    for (const char* workload : {"cnn", "resnet"}) {
      INFO(workload << ", TOWERJIT_CUDNN=" << cudnn);
      const LaunchCounts c = launch_counts(workload);
      CHECK(c.larger == c.small);
    }
  }
}

TEST_CASE("cost goals: a step's feeds go up in one copy") {
  // The image and the labels sit in one device block laid out as the page-locked staging is
  // (CudaProgram::stage_feeds), so the step uploads them with one cuMemcpyHtoDAsync.
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  for (const char* workload : {"mlp", "cnn"}) {
    INFO(workload);
    const bench::ModelledStep m = bench::record_workload(h, workload, 7);
    CHECK(std::count_if(m.launches.begin(), m.launches.end(),
                        [](const cost::Launch& l) { return l.name == "cuMemcpyHtoDAsync"; }) == 1);
  }
}

TEST_CASE("cost goals: the cnn and resnet steps make at most 4 launches a layer", "[.goal]") {
  for (const char* workload : {"cnn", "resnet"}) {
    INFO(workload);
    const LaunchCounts c = launch_counts(workload);
    CHECK(c.larger <= static_cast<size_t>(4 * c.layers));
  }
}

TEST_CASE("cost goals: the MLP step at batch 4096 is predicted within 1.3x of its roofline floor") {
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  const bench::ModelledStep m = bench::record_workload(h, "mlp", 4096);
  const cost::StepPrediction p = cost::predict_step(h, m.launches);
  std::printf("mlp b4096 on h200: predicted %.3f ms, floor %.3f ms, ratio %.2f, %lld launches\n",
              p.device_us / 1e3, p.floor_us / 1e3, p.ratio(), static_cast<long long>(p.launches_count));
  CHECK(p.ratio() <= 1.3);
}
