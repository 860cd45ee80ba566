// Checks written from the cost model's own records (runtime/cost/recorded_step.h): a training
// step of the example's models on the emulated GPU, reporting an H200's 132 SMs, recorded launch
// by launch. They assert on launch shapes, counts and the model's ratio, never on timings. Each
// case sets the emulated GPU up itself, so it runs in a process of its own (as ctest runs it).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "bench/gpu_model.h"
#include "jit/cost/gpu_specs.h"
#include "jit/cost/launch_model.h"
#include "runtime/cost/recorded_step.h"
#include "tests/jit/cpu_test_env.h"
#include "towerjit.h"

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
  // The hidden layers' bias and ReLU are their products' epilogues: no kernel of their own.
  for (const cost::Launch& l : m.launches) CHECK(l.name.find("relu_add") == std::string::npos);
  // Grids the runtime caps at 32 blocks an SM go past what the emulator's default 4 SMs allow:
  // the apply's group kernel over the MLP's 0.67 M parameters runs on more than 128 blocks.
  int64_t widest = 0;
  for (const cost::Launch& l : m.launches) widest = std::max(widest, l.blocks);
  CHECK(widest > 4 * 32);
}

// With the epilogues off, fc1's bias+ReLU kernel is a launch of its own: [256, 512] elementwise
// (in the tower step's module, "tower_step" or, as the process's second, "tower_step_2"),
// in float4, 32768 vectors over 128 blocks, one a thread.
TEST_CASE("cost records: with TOWERJIT_MATMUL_EPILOGUES=off the bias+ReLU kernel is a float4 launch") {
  towerjit::test::ScopedEnv off("TOWERJIT_MATMUL_EPILOGUES", "off");
  const bench::ModelledStep m = bench::record_workload(cost::gpu_spec("h200"), "mlp", 256);
  bool found = false;
  for (const cost::Launch& l : m.launches)
    if (l.name.find("relu_add") != std::string::npos && l.module.rfind("tower_step", 0) == 0) {
      found = true;
      CHECK(l.blocks == 128);
      CHECK(l.work_max == 4);  // the 4 lanes of its float4
    }
  CHECK(found);
}

// The failing checks of issue 21 are in test_recorded_steps_goals.cpp.

// The fused attention's three library kernels are launches the cost model prices: a block of
// 16 threads a row for 16 rows, the bytes and FLOPs of emulator/driver/library_kernel_costs.cpp.
// Under the bf16 policy the products read 2-byte operands and are priced at the BF16 peak; the
// kernels that store the rounded operands write 2 bytes an element (the program's index).
TEST_CASE("cost records: a bf16-policy step reads 2-byte product operands at the BF16 peak") {
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  const bench::ModelledStep m = bench::record_workload(h, "mlp", 256, towerjit::DType::bf16);
  int gemms = 0;
  for (const cost::Launch& l : m.launches) {
    if (l.kind != "library") continue;
    INFO(l.name << " " << l.gemm_m << "x" << l.gemm_n << "x" << l.gemm_k);
    ++gemms;
    CHECK(l.half_operands);
    CHECK(l.name == "cublasLtMatmul (BF16)");
    const double mm = l.gemm_m, nn = l.gemm_n, kk = l.gemm_k, batch = l.gemm_batch;
    CHECK(l.bytes == batch * (2 * (mm * kk + kk * nn) + 4 * mm * nn));
    cost::Launch as_f32 = l;
    as_f32.half_operands = false;
    CHECK(cost::predict_launch(h, l).flop_us < cost::predict_launch(h, as_f32).flop_us);
  }
  CHECK(gemms == 8);
}

// Under the bf16 policy the cnn's convolutions run on cuDNN's 16-bit configuration: each call
// of the f32 step has a twin named "... (BF16)" with the same FLOPs, half the bytes (2-byte
// operands and result) and a shorter compute time at the BF16 peak.
TEST_CASE("cost records: a bf16-policy step runs its convolutions on cuDNN in bf16, half the bytes, at the BF16 peak") {
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  auto convolutions = [&](towerjit::DType precision) {
    std::vector<cost::Launch> out;
    for (const cost::Launch& l : bench::record_workload(h, "cnn", 16, precision).launches)
      if (l.name.rfind("cudnnConvolution", 0) == 0) out.push_back(l);
    return out;
  };
  const std::vector<cost::Launch> f32 = convolutions(towerjit::DType::f32), bf16 = convolutions(towerjit::DType::bf16);
  REQUIRE(f32.size() == 5);  // two forward, two filter gradients, one data gradient (the first layer's input needs none)
  REQUIRE(bf16.size() == f32.size());
  for (size_t i = 0; i < f32.size(); ++i) {
    INFO(f32[i].name);
    CHECK(!f32[i].half_operands);
    CHECK(bf16[i].half_operands);
    CHECK(bf16[i].name == f32[i].name + " (BF16)");
    CHECK(bf16[i].flops == f32[i].flops);
    CHECK(2 * bf16[i].bytes == f32[i].bytes);
    CHECK(cost::predict_launch(h, bf16[i]).flop_us < cost::predict_launch(h, f32[i]).flop_us);
  }
}

TEST_CASE("cost records: the fused attention runs as its three kernels, each with bytes and FLOPs") {
  namespace tj = towerjit;
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  std::string dir = (std::filesystem::temp_directory_path() / "towerjit-attention-cost-XXXXXX").string();
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  cost::prepare_emulated_gpu(h, dir);
  constexpr int64_t kBatch = 4, kT = 37, kD = 8;  // 4 x 2 heads = 8 problems, three 16-row blocks each
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {tj::kBatch, 2, kT, kD});
  auto q = tj::matmul(x, tj::variable("w", {kD, kD}, {.init = tj::init::normal(0, 0.5)}));
  auto y = tj::scaled_dot_product_attention(q, q, q, {.causal = true});  // every input differentiated
  auto loss = tj::mean(y * y);
  tj::TowerTrainer trainer(g, loss, tj::Towers({tj::gpu(0)}), tj::sgd(0.1),
                           tj::TowerTrainerOptions{.seed = 1, .strategy = {.gpu_variables = true}});
  tj::HostTensor xs(tj::Shape{kBatch, 2, kT, kD});
  for (size_t i = 0; i < xs.f32.size(); ++i) xs.f32[i] = static_cast<float>((i * 37 % 101) / 50.0 - 1);
  const tj::HostFeeds feeds{{"x", xs}};
  trainer.step(feeds);
  const std::vector<cost::Launch> launches = cost::record_step(trainer, feeds, dir, kBatch);
  std::filesystem::remove_all(dir);
  const double pairs = 8.0 * kT * (kT + 1) / 2;  // causal: query i sees i + 1 keys
  std::map<std::string, int> seen;
  for (const cost::Launch& l : launches) {
    if (l.name.rfind("tj_attention", 0) != 0) continue;
    INFO(l.name);
    ++seen[l.name];
    CHECK(l.blocks == 24);
    CHECK(l.threads_per_block == 256);
    CHECK(l.shared_bytes >= 2 * 4096 * 4);  // two tiles of 4096 floats
    CHECK(l.bytes > 0);
    const double per_pair = l.name == "tj_attention" ? 2 * kD + 2 * kD + 4
                            : l.name == "tj_attention_grad_q" ? 4 * kD + 2 * kD + 6
                                                              : 4 * kD + 4 * kD + 6;
    CHECK(l.flops == pairs * per_pair);
  }
  CHECK(seen == std::map<std::string, int>{{"tj_attention", 1}, {"tj_attention_grad_q", 1}, {"tj_attention_grad_kv", 1}});
}

// The fused layer norm's kernels are launches the cost model prices: a warp a row and 8 rows
// a block forward and for dx, 64-row blocks for the gain's and bias' partial sums, then one
// thread a column (emulator/driver/library_kernel_costs.cpp).
TEST_CASE("cost records: the fused layer norm runs as its four kernels, each with bytes and FLOPs") {
  namespace tj = towerjit;
  const cost::GpuSpec& h = cost::gpu_spec("h200");
  std::string dir = (std::filesystem::temp_directory_path() / "towerjit-layer-norm-cost-XXXXXX").string();
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  cost::prepare_emulated_gpu(h, dir);
  constexpr int64_t kBatch = 5, kT = 27, kF = 40;  // 135 rows: 17 blocks of 8, 3 of 64
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {tj::kBatch, kT, kF});
  auto h1 = tj::matmul(x, tj::variable("w", {kF, kF}, {.init = tj::init::normal(0, 0.5)}));
  auto y = tj::layer_norm(h1, "ln");
  auto loss = tj::mean(y * y);
  tj::TowerTrainer trainer(g, loss, tj::Towers({tj::gpu(0)}), tj::sgd(0.1),
                           tj::TowerTrainerOptions{.seed = 1, .strategy = {.gpu_variables = true}});
  tj::HostTensor xs(tj::Shape{kBatch, kT, kF});
  for (size_t i = 0; i < xs.f32.size(); ++i) xs.f32[i] = static_cast<float>((i * 37 % 101) / 50.0 - 1);
  const tj::HostFeeds feeds{{"x", xs}};
  trainer.step(feeds);
  const std::vector<cost::Launch> launches = cost::record_step(trainer, feeds, dir, kBatch);
  std::filesystem::remove_all(dir);
  const double elements = kBatch * kT * kF;
  std::map<std::string, int> seen;
  for (const cost::Launch& l : launches) {
    if (l.name.rfind("tj_layer_norm", 0) != 0) continue;
    INFO(l.name);
    ++seen[l.name];
    CHECK(l.threads_per_block == 256);
    CHECK(l.bytes > 0);
    const bool rows = l.name == "tj_layer_norm" || l.name == "tj_layer_norm_grad_input";
    const bool partial = l.name == "tj_layer_norm_grad_params_partial";
    CHECK(l.blocks == (rows ? 17 : partial ? 3 : 1));
    const double flops = l.name == "tj_layer_norm" ? 10 * elements
                         : l.name == "tj_layer_norm_grad_input" ? 17 * elements
                         : partial ? 10 * elements : 3 * 2 * kF;
    CHECK(l.flops == flops);
  }
  CHECK(seen == std::map<std::string, int>{{"tj_layer_norm", 1}, {"tj_layer_norm_grad_input", 1},
                                           {"tj_layer_norm_grad_params_partial", 1}, {"tj_layer_norm_grad_params_sum", 1}});
}
