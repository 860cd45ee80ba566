// The GPU cost model (jit/cost/launch_model.h) on hand-computed cases: each expected value is
// the closed form of the model's documentation, worked out here from the GPU's figures.
#include <catch2/catch.hpp>

#include "dsl/error.h"
#include "jit/cost/gpu_specs.h"
#include "jit/cost/launch_model.h"

namespace cost = towerjit::cost;

namespace {

cost::Launch kernel(int64_t blocks, int64_t threads, double bytes, uint64_t work_max) {
  cost::Launch l;
  l.name = "k";
  l.blocks = blocks;
  l.threads_per_block = threads;
  l.bytes = bytes;
  l.work_max = work_max;
  l.work_mean = static_cast<double>(work_max);
  return l;
}

}  // namespace

TEST_CASE("cost model: the table names its GPUs and refuses others") {
  CHECK(cost::gpu_spec("H200").sms == 132);
  CHECK(cost::gpu_spec("a100").sms == 108);
  CHECK_THROWS_WITH(cost::gpu_spec("v100"), Catch::Contains("no GPU named \"v100\"") && Catch::Contains("h200, a100"));
}

TEST_CASE("cost model: blocks an SM holds at once") {
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  CHECK(cost::blocks_per_sm(h, 256, 0) == 8);           // 2048 threads / 256
  CHECK(cost::blocks_per_sm(h, 32, 0) == 32);           // the 32-block limit
  CHECK(cost::blocks_per_sm(h, 256, 100 * 1024) == 2);  // 228 KiB / 100 KiB
  CHECK(cost::blocks_per_sm(h, 1024, 0) == 2);
  CHECK(cost::blocks_per_sm(h, 2048, 300 * 1024) == 1);  // never below 1
}

TEST_CASE("cost model: a streaming kernel over every SM runs at the achievable bandwidth") {
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  // 1056 blocks = one wave of 8 blocks on each of 132 SMs; 1 GB; one point a thread.
  const auto p = cost::predict_launch(h, kernel(1056, 256, 1e9, 1));
  static_assert(cost::kPointsInFlight == 4);
  CHECK(p.waves == 1);
  CHECK(p.mem_us == Approx(1e9 / 4.3e6));  // 232.56 us
  CHECK(p.latency_us == Approx(0.5));
  CHECK(p.us == Approx(1e9 / 4.3e6));
  CHECK(p.bound == "bandwidth");
  // 133 blocks: the busiest SM runs 2 of them, each 1/133 of the bytes, at 1/132 of the bandwidth.
  const auto tail = cost::predict_launch(h, kernel(133, 256, 1e9, 1));
  CHECK(tail.mem_us == Approx(2 * (1e9 / 133) / (4.3e6 / 132)));
}

TEST_CASE("cost model: one block gets one SM's share of the bandwidth and its threads' serial latency") {
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  // The cnn column reduction: grid 1 x 256 over 77 MB, 75,000 points a thread.
  const auto p = cost::predict_launch(h, kernel(1, 256, 77e6, 75000));
  CHECK(p.mem_us == Approx(77e6 / (4.3e6 / 132)));  // 2364 us
  CHECK(p.latency_us == Approx(75000 / 4 * 0.5));    // 9,375 us: 4 points in flight
  CHECK(cost::predict_launch(h, kernel(1, 256, 77e6, 75001)).latency_us == Approx(18751 * 0.5));
  CHECK(p.bound == "latency");
  // The same bytes over 1056 blocks of one point a thread each is bandwidth-bound again.
  CHECK(cost::predict_launch(h, kernel(1056, 256, 77e6, 1)).us == Approx(77e6 / 4.3e6));
}

TEST_CASE("cost model: a matrix product pays for its tiles in waves over the SMs") {
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  cost::Launch g;
  g.kind = "library";
  g.name = "cublasSgemmStridedBatched";
  g.gemm_m = g.gemm_n = g.gemm_k = 4096;
  g.gemm_batch = 1;
  g.flops = 2.0 * 4096 * 4096 * 4096;
  g.bytes = 4.0 * 3 * 4096 * 4096;
  const auto p = cost::predict_launch(h, g);
  // 32 x 32 = 1024 tiles of 128 x 128: ceil(1024 / 132) = 8 waves of 2*128*128*4096 FLOPs.
  CHECK(p.waves == 8);
  CHECK(p.flop_us == Approx(8 * (2.0 * 128 * 128 * 4096) / (67e6 / 132)));
  CHECK(p.bound == "compute");
  // A product of one image, 16 x 784 x 9: tiles of 32, 25 along n, k too short to split.
  g.gemm_m = 16, g.gemm_n = 784, g.gemm_k = 9;
  CHECK(cost::gemm_tile(h, 16, 784) == 32);
  CHECK(cost::gemm_tile(h, 100, 784) == 64);
  CHECK(cost::gemm_tile(h, 784, 512) == 128);
  const auto small = cost::predict_launch(h, g);
  CHECK(small.waves == 1);
  CHECK(small.flop_us == Approx(2.0 * 32 * 32 * 9 / (67e6 / 132)));
  // The MLP's first weight gradient, 784 x 512 x 4096: 7 x 4 = 28 tiles split 4 ways along k
  // (floor(132 / 28)), 112 blocks in one wave of 1024-deep slices; the partials cost 8*4*m*n bytes.
  g.gemm_m = 784, g.gemm_n = 512, g.gemm_k = 4096;
  g.bytes = 4.0 * (784 * 4096 + 4096 * 512 + 784 * 512);
  const auto split = cost::predict_launch(h, g);
  CHECK(split.waves == 1);
  CHECK(split.flop_us == Approx(2.0 * 128 * 128 * 1024 / (67e6 / 132)));
  CHECK(split.mem_us == Approx((g.bytes + 8.0 * 4 * 784 * 512) / 4.3e6));
  cost::ModelOptions tf32{.tf32 = true};
  g.gemm_m = g.gemm_n = g.gemm_k = 4096;
  CHECK(cost::predict_launch(h, g, tf32).flop_us == Approx(8 * (2.0 * 128 * 128 * 4096) / (494.7e6 / 132)));
  // bf16 or f16 operands: the tensor cores' BF16 / FP16 peak, with --tf32 or without.
  g.half_operands = true;
  CHECK(cost::predict_launch(h, g).flop_us == Approx(8 * (2.0 * 128 * 128 * 4096) / (989.4e6 / 132)));
  CHECK(cost::predict_launch(h, g, tf32).flop_us == Approx(8 * (2.0 * 128 * 128 * 4096) / (989.4e6 / 132)));
}

TEST_CASE("cost model: a step adds launch overheads, keeps host copies apart, and has a roofline floor") {
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  cost::Launch copy;
  copy.kind = "copy";
  copy.host_link = true;
  copy.bytes = 2 * 55e6;  // 55 MB read on the host and written on the device
  const std::vector<cost::Launch> step = {kernel(1056, 256, 1e9, 1), kernel(1, 256, 4e3, 4), copy};
  const auto s = cost::predict_step(h, step);
  const double k1 = 1e9 / 4.3e6, k2 = std::max(4e3 / (4.3e6 / 132), 1 * 0.5);
  CHECK(s.device_us == Approx(k1 + k2 + 2 * 2.0));
  CHECK(s.overhead_us == Approx(4.0));
  CHECK(s.host_link_us == Approx(1000 + 2.0));  // 55 MB at 55 GB/s
  CHECK(s.floor_us == Approx((1e9 + 4e3) / 4.3e6));
  CHECK(s.launches_count == 3);
  CHECK(s.ratio() == Approx(s.device_us / s.floor_us));
  const auto graph = cost::predict_step(h, step, {.graph = true});
  CHECK(graph.device_us == Approx(k1 + k2 + 2 * 0.5));
  auto replayed = step;  // the second kernel recorded as a graph's node: its overhead alone is a node's
  replayed[1].graph = true;
  CHECK(cost::predict_step(h, replayed).device_us == Approx(k1 + k2 + 2.0 + 0.5));
}
