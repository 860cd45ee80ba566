// Async GPU towers with each variable on one GPU (runtime/towers/placed_variables.cpp), on two
// GPUs: the seed's placement (each model variable on the GPU holding the fewest bytes so far,
// its optimiser slots and EMA shadow with it, the global step in host memory), training that
// matches the variables kept in host memory, applies none of which is lost, checkpoints that
// read back, and the seed's CPU placement from 4 towers on.
#include <algorithm>
#include <random>

#include "gpu_check.h"
#include "tests/runtime/tower_test_model.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::testing::batch_feeds;

namespace {

// 784-32-10 ReLU MLP, mean cross-entropy; Adam with an EMA, so slots, shadows and the global
// step all travel with the applies.
struct Mlp {
  tj::Graph graph;
  tj::Tensor loss;
  Mlp() {
    tj::GraphScope use(graph);
    auto image = tj::input("image", {kBatch, 784});
    auto label = tj::input("label", {kBatch}, tj::DType::i32);
    auto logits = tj::dense(tj::relu(tj::dense(image, 32, "fc1")), 10, "fc2");
    loss = tj::mean(tj::softmax_cross_entropy(logits, label));
  }
};

tj::TowerTrainerOptions with_ema(std::optional<bool> gpu_variables) {
  return {.ema = tj::ExponentialMovingAverage{.decay = 0.9}, .strategy = {.gpu_variables = gpu_variables}};
}

}  // namespace

TEST_CASE("GPU: async GPU towers place each variable on the least-loaded GPU, its state with it", "[gpu]") {
  if (tj::testing::skip_unless_gpus(2)) return;
  Mlp m;
  tj::TowerTrainer trainer(m.graph, m.loss, tj::Towers{tj::gpu(0), tj::gpu(1)}.reduce(tj::AsyncApply{}),
                           tj::adam(0.01), with_ema(std::nullopt));
  // fc1/kernel (100,352 bytes) goes first, to gpu:0; gpu:1 then holds less after each of the
  // others (128, 1,280 and 40 bytes), so they all go there.
  const auto devices = trainer.variable_devices();
  const std::map<std::string, tj::Device> expected = {
      {"fc1/kernel", tj::gpu(0)}, {"fc1/bias", tj::gpu(1)}, {"fc2/kernel", tj::gpu(1)}, {"fc2/bias", tj::gpu(1)}};
  for (const auto& [variable, device] : expected) {
    INFO(variable);
    CHECK(devices.at(variable) == std::vector<tj::Device>{device});
    CHECK(devices.at(variable + "/adam_m") == std::vector<tj::Device>{device});
    CHECK(devices.at(variable + "/adam_v") == std::vector<tj::Device>{device});
  }
  CHECK(devices.at("global_step") == std::vector<tj::Device>{tj::cpu(0)});
  CHECK(devices.size() == trainer.variables().size());
}

TEST_CASE("GPU: an async GPU tower with placed variables trains as one with them in host memory", "[gpu]") {
  if (tj::testing::skip_unless_gpus(2)) return;
  // One tower: the same reads and applies in the same order, only where the apply runs differs
  // (each variable's on the GPU, against the whole apply on the CPU). The two compilers'
  // powf and division may differ by an ulp or two in Adam's bias corrections and steps; over
  // 12 applies of a rate 0.01 that stays far inside 1e-4 relative (as CPU and GPU towers are
  // compared in test_gpu_training.cpp).
  auto train = [](std::optional<bool> gpu_variables) {
    Mlp m;
    tj::TowerTrainer trainer(m.graph, m.loss, tj::Towers{tj::gpu(1)}.reduce(tj::AsyncApply{}), tj::adam(0.01),
                             with_ema(gpu_variables));
    std::vector<double> losses;
    for (int k = 0; k < 12; ++k) losses.push_back(trainer.step(batch_feeds(13, 700 + k)).loss);
    return std::tuple(losses, trainer.variables(), trainer.variable_devices().at("fc1/kernel"));
  };
  const auto [host_losses, host_vars, host_device] = train(false);
  const auto [placed_losses, placed_vars, placed_device] = train(std::nullopt);
  CHECK(host_device == std::vector<tj::Device>{tj::cpu(0)});
  CHECK(placed_device == std::vector<tj::Device>{tj::gpu(1)});
  for (size_t k = 0; k < host_losses.size(); ++k) CHECK(placed_losses[k] == Approx(host_losses[k]).epsilon(1e-4));
  REQUIRE(placed_vars.size() == host_vars.size());
  for (const auto& [name, t] : host_vars)
    for (int64_t i = 0; i < t.size(); ++i) {
      INFO(name << "[" << i << "]");
      CHECK(placed_vars.at(name).f32[i] == Approx(t.f32[i]).epsilon(1e-4).margin(1e-5));
    }
  CHECK(placed_vars.at("global_step").f32[0] == 12);
}

TEST_CASE("GPU: async towers on two GPUs apply every gradient once to each placed variable, none lost", "[gpu]") {
  if (tj::testing::skip_unless_gpus(2)) return;
  // loss = mean(x . w1) + 2 mean(x . w2): the gradients, the batch means of x (and twice them),
  // do not depend on w, so whatever order the towers apply in, each variable's change is
  // exactly the sum of the applied steps. w1 lives on gpu:0, w2 on gpu:1 (equal sizes: the tie
  // goes to the first GPU, then the other holds less).
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 6});
  auto w1 = tj::variable("w1", {6, 1}, {.init = tj::init::zeros()});
  auto w2 = tj::variable("w2", {6, 1}, {.init = tj::init::zeros()});
  auto loss = tj::mean(tj::matmul(x, w1)) + 2.0 * tj::mean(tj::matmul(x, w2));
  tj::TowerTrainer trainer(g, loss, tj::Towers{tj::gpu(0), tj::gpu(1), tj::gpu(1)}.reduce(tj::AsyncApply{}),
                           tj::sgd(0.1));
  CHECK(trainer.variable_devices().at("w1") == std::vector<tj::Device>{tj::gpu(0)});
  CHECK(trainer.variable_devices().at("w2") == std::vector<tj::Device>{tj::gpu(1)});
  std::vector<double> expected(6, 0.0);
  const int steps = 8, n = 3;
  for (int step = 0; step < steps; ++step) {
    tj::HostTensor xs({11, 6});
    std::mt19937 rng(step);
    for (float& v : xs.f32) v = static_cast<float>(rng() % 100) / 50.0f;
    const auto slices = trainer.step({{"x", xs}}).slices;
    int64_t offset = 0;
    for (int64_t s : slices) {  // tower i applies -0.1 * (1/N) * the mean of its rows
      for (int j = 0; j < 6; ++j) {
        double mean = 0;
        for (int64_t r = offset; r < offset + s; ++r) mean += xs.f32[r * 6 + j];
        expected[j] -= 0.1 / n * mean / s;
      }
      offset += s;
    }
  }
  CHECK(trainer.applies() == n * steps);
  const tj::HostVariables& values = trainer.variables();
  for (int j = 0; j < 6; ++j) {
    CHECK(values.at("w1").f32[j] == Approx(expected[j]).epsilon(1e-5));
    CHECK(values.at("w2").f32[j] == Approx(2 * expected[j]).epsilon(1e-5));
  }
  // A checkpoint's values read back into the GPUs' copies.
  tj::HostVariables saved = values;
  tj::HostTensor ones({3, 6});
  std::fill(ones.f32.begin(), ones.f32.end(), 1.0f);
  trainer.step({{"x", ones}});
  CHECK(trainer.variables().at("w1").f32[0] != saved.at("w1").f32[0]);
  trainer.restore(saved, n * steps);
  CHECK(trainer.variables().at("w1").f32 == saved.at("w1").f32);
  CHECK(trainer.variables().at("w2").f32 == saved.at("w2").f32);
}

TEST_CASE("GPU: from 4 async towers on, the variables live on the CPU, as the seed places them", "[gpu]") {
  if (tj::testing::skip_unless_gpus(2)) return;
  tj::Graph graph;
  const tj::Tensor loss = tj::testing::small_mlp_loss(graph);
  tj::TowerTrainer trainer(graph, loss, tj::Towers{tj::gpu(0), tj::gpu(0), tj::gpu(1), tj::gpu(1)}.reduce(tj::AsyncApply{}),
                           tj::sgd(0.1), {.strategy = {.gpu_variables = true}});
  for (const auto& [name, devices] : trainer.variable_devices()) {
    INFO(name);
    CHECK(devices == std::vector<tj::Device>{tj::cpu(0)});
  }
  CHECK(trainer.step(tj::testing::batch_of(8, 3)).loss > 0);
}

TEST_CASE("GPU: an apply that cannot be cut by variable is named at the trainer's line", "[gpu]") {
  if (tj::testing::skip_unless_gpus(2)) return;
  Mlp m;
  const int line = __LINE__ + 1;
  CHECK_THROWS_WITH(tj::TowerTrainer(m.graph, m.loss, tj::Towers{tj::gpu(0), tj::gpu(1)}.reduce(tj::AsyncApply{}),
                                     tj::sgd(0.1).with_clip_by_global_norm(1.0)),
                    Catch::Contains("clip_by_global_norm sums every gradient") &&
                        Catch::Contains("test_gpu_async_placement.cpp:" + std::to_string(line)));
}

TEST_CASE("GPU: sync parameter-server GPU towers with placed variables train as CPU towers do", "[gpu]") {
  if (tj::testing::skip_unless_gpus(2)) return;
  // Each variable on one of two GPUs, the towers' gradients summed there (n_i/B, in tower order)
  // and applied by itself; batch norm's moving statistics averaged into their GPU. Against two
  // CPU towers on the same uneven slices (7 + 8 of 15), within 1e-4 over 15 momentum steps, as
  // test_gpu_training.cpp compares CPU and GPU towers.
  auto train = [](tj::Towers towers, std::optional<bool> gpu_variables) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto image = tj::input("image", {kBatch, 784});
    auto label = tj::input("label", {kBatch}, tj::DType::i32);
    auto h = tj::relu(tj::batch_norm(tj::dense(image, 32, "fc1"), "bn1"));
    auto loss = tj::mean(tj::softmax_cross_entropy(tj::dense(h, 10, "fc2"), label));
    tj::TowerTrainer trainer(g, loss, towers.variant(tj::SyncVariant::parameter_server), tj::momentum(0.05, 0.9),
                             {.strategy = {.gpu_variables = gpu_variables}});
    std::vector<double> losses;
    for (int k = 0; k < 15; ++k) losses.push_back(trainer.step(batch_feeds(15, 900 + k)).loss);
    return std::tuple(losses, trainer.variables(), trainer.variable_devices());
  };
  const auto [cpu_losses, cpu_vars, cpu_devices] = train(tj::Towers{tj::cpu(0), tj::cpu(1)}, std::nullopt);
  const auto [gpu_losses, gpu_vars, gpu_devices] = train(tj::Towers{tj::gpu(0), tj::gpu(1)}, true);
  // fc1/kernel to gpu:0, then gpu:1 holds less after each of the others.
  CHECK(gpu_devices.at("fc1/kernel") == std::vector<tj::Device>{tj::gpu(0)});
  CHECK(gpu_devices.at("fc1/kernel/momentum") == std::vector<tj::Device>{tj::gpu(0)});
  CHECK(gpu_devices.at("bn1/moving_mean") == std::vector<tj::Device>{tj::gpu(1)});
  CHECK(gpu_devices.at("fc2/kernel") == std::vector<tj::Device>{tj::gpu(1)});
  CHECK(cpu_devices.at("fc1/kernel") == std::vector<tj::Device>{tj::cpu(0)});
  for (size_t k = 0; k < cpu_losses.size(); ++k) CHECK(gpu_losses[k] == Approx(cpu_losses[k]).epsilon(1e-4));
  REQUIRE(gpu_vars.size() == cpu_vars.size());
  for (const auto& [name, t] : cpu_vars)
    for (int64_t i = 0; i < t.size(); ++i) {
      INFO(name << "[" << i << "]");
      CHECK(gpu_vars.at(name).f32[i] == Approx(t.f32[i]).epsilon(1e-4).margin(1e-5));
    }
}
