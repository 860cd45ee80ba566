// Training on the GPU: the MLP training step (forward, backward, SGD with momentum as update
// ops) equals the CPU backend's after 20 steps; weights kept on the device give the same
// bits as weights copied in and out every step; a run is bitwise reproducible; and two
// towers sharing one GPU, each on its own stream and thread, compute what each computes alone.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <utility>

#include "gpu_check.h"
#include "runtime/cpu/cpu_program.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::testing::batch_feeds;
using tj::testing::initial;
using tj::kBatch;
using tj::Tensor;

namespace {

// 784-256-256-10 ReLU MLP, mean cross-entropy plus L2, SGD momentum (0.05, 0.9).
struct Mlp {
  tj::Graph graph;
  Tensor loss;
  Mlp() {
    tj::GraphScope use(graph);
    auto image = tj::input("image", {kBatch, 784});
    auto label = tj::input("label", {kBatch}, tj::DType::i32);
    auto h = tj::relu(tj::dense(image, 256, "fc1"));
    h = tj::relu(tj::dense(h, 256, "fc2"));
    auto logits = tj::dense(h, 10, "logits");
    loss = tj::mean(tj::softmax_cross_entropy(logits, label)) + 4e-5 * tj::l2_loss(tj::trainable_variables());
    auto vars = tj::trainable_variables();
    tj::momentum(0.05, 0.9).apply(tj::grad(loss, vars), vars);
  }
};

// max |a - b| / max |b| over the elements of one tensor (b the CPU's).
double relative(const tj::HostTensor& a, const tj::HostTensor& b) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < b.size(); ++i) {
    const double x = a.dtype == tj::DType::f32 ? a.f32[i] : a.i32[i], y = b.dtype == tj::DType::f32 ? b.f32[i] : b.i32[i];
    diff = std::max(diff, std::abs(x - y));
    scale = std::max(scale, std::abs(y));
  }
  return scale > 0 ? diff / scale : diff;
}

bool same_bits(const tj::HostVariables& a, const tj::HostVariables& b) {
  for (const auto& [name, t] : b)
    if (std::memcmp(a.at(name).data(), t.data(), t.size() * 4) != 0) return false;
  return true;
}

}  // namespace

TEST_CASE("GPU: the MLP training step equals the CPU backend's after 20 steps", "[gpu]") {
  Mlp m;
  tj::CpuProgram cpu(m.graph, {m.loss}, /*run_update_ops=*/true);
  tj::CudaProgram gpu(m.graph, {m.loss}, /*run_update_ops=*/true);
  tj::HostVariables cpu_vars = initial(m.graph), gpu_vars = cpu_vars;
  for (int k = 0; k < 20; ++k) {
    const tj::HostFeeds feeds = batch_feeds(64, 100 + k);
    const double cpu_loss = cpu.run(feeds, cpu_vars, k)[0].f32[0];
    const double gpu_loss = gpu.run(feeds, gpu_vars, k)[0].f32[0];
    INFO("step " << k << ": loss CPU " << cpu_loss << ", GPU " << gpu_loss);
    CHECK(std::abs(gpu_loss - cpu_loss) <= 1e-4 * std::abs(cpu_loss));
  }
  for (const auto& [name, t] : cpu_vars) {
    const double err = relative(gpu_vars.at(name), t);
    INFO("variable \"" << name << "\" " << t.shape.str() << " after 20 steps: max |GPU - CPU| / max |CPU| = " << err
                       << ", tolerance 1e-4");
    CHECK(err <= 1e-4);
  }
}

TEST_CASE("GPU: weights kept on the device give the same bits, and runs are reproducible", "[gpu]") {
  Mlp m;
  tj::CudaProgram gpu(m.graph, {m.loss}, /*run_update_ops=*/true);
  tj::HostVariables host_a = initial(m.graph), host_b = host_a;
  tj::DeviceVariables device = tj::to_device(host_a, gpu.device(), gpu.stream());
  std::vector<float> losses_a, losses_b, losses_device;
  for (int k = 0; k < 5; ++k) {
    const tj::HostFeeds feeds = batch_feeds(37, 7 + k);  // an odd batch: tails in every kernel
    losses_a.push_back(gpu.run(feeds, host_a, k)[0].f32[0]);
    losses_device.push_back(gpu.run(feeds, device, k)[0].f32[0]);
  }
  tj::CudaProgram again(m.graph, {m.loss}, /*run_update_ops=*/true);
  for (int k = 0; k < 5; ++k) losses_b.push_back(again.run(batch_feeds(37, 7 + k), host_b, k)[0].f32[0]);
  CHECK(losses_a == losses_device);
  CHECK(losses_a == losses_b);
  CHECK(same_bits(tj::to_host(device, gpu.stream()), host_a));
  CHECK(same_bits(host_b, host_a));
}

TEST_CASE("GPU: two towers sharing one GPU on their own streams compute what each does alone", "[gpu]") {
  Mlp m;
  tj::CudaProgram tower0(m.graph, {m.loss}, /*run_update_ops=*/true);
  tj::CudaProgram tower1(m.graph, {m.loss}, /*run_update_ops=*/true);
  REQUIRE(tower0.stream().handle() != tower1.stream().handle());
  const tj::HostVariables start = initial(m.graph);
  tj::HostVariables alone0 = start, alone1 = start, shared0 = start, shared1 = start;
  for (int k = 0; k < 3; ++k) {
    tower0.run(batch_feeds(48, 200 + k), alone0, k);
    tower1.run(batch_feeds(80, 300 + k), alone1, k);
  }
  std::string error0, error1;  // an exception must not escape a thread
  auto train = [](tj::CudaProgram& p, int64_t batch, uint32_t seed, tj::HostVariables& vars, std::string& error) {
    try {
      for (int k = 0; k < 3; ++k) p.run(batch_feeds(batch, seed + k), vars, k);
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  std::thread t0(train, std::ref(tower0), 48, 200, std::ref(shared0), std::ref(error0));
  std::thread t1(train, std::ref(tower1), 80, 300, std::ref(shared1), std::ref(error1));
  t0.join();
  t1.join();
  REQUIRE(error0 == "");
  REQUIRE(error1 == "");
  CHECK(same_bits(shared0, alone0));
  CHECK(same_bits(shared1, alone1));
}

TEST_CASE("GPU: GPU towers train as CPU towers do (sync average, 20 steps, uneven split)", "[gpu]") {
  // Two towers sharing gpu:0 against two CPU towers: the same slices (7 + 8 of 15). With the
  // variables on the host, the same host all-reduce and apply, only the towers' forward and
  // backward on the GPU; with TOWERJIT_GPU_VARIABLES=on, the in-device reduction (per gradient
  // bucket) and the apply on the GPU too, the variables staying there.
  auto train = [](tj::Towers towers) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto image = tj::input("image", {kBatch, 784});
    auto label = tj::input("label", {kBatch}, tj::DType::i32);
    auto logits = tj::dense(tj::relu(tj::dense(image, 32, "fc1")), 10, "fc2");
    auto loss = tj::mean(tj::softmax_cross_entropy(logits, label));
    tj::TowerTrainer trainer(g, loss, std::move(towers), tj::momentum(0.05, 0.9));
    std::vector<double> losses;
    for (int k = 0; k < 20; ++k) losses.push_back(trainer.step(batch_feeds(15, 500 + k)).loss);
    return std::make_pair(losses, trainer.variables());
  };
  const auto [cpu_losses, cpu_vars] = train(tj::Towers{tj::cpu(0), tj::cpu(1)});
  // Variables on the host; on the GPU in one bucket; on the GPU with every gradient a bucket of
  // its own, reduced while the backward pass goes on.
  for (const auto& [variables_on_gpu, bucket_mb] : {std::pair{"off", "25"}, std::pair{"on", "25"}, std::pair{"on", "0"}}) {
    ::setenv("TOWERJIT_GPU_VARIABLES", variables_on_gpu, 1);
    ::setenv("TOWERJIT_BUCKET_MB", bucket_mb, 1);
    const auto [gpu_losses, gpu_vars] = train(tj::Towers{tj::gpu(0), tj::gpu(0)});
    ::unsetenv("TOWERJIT_GPU_VARIABLES");
    ::unsetenv("TOWERJIT_BUCKET_MB");
    INFO("TOWERJIT_GPU_VARIABLES=" << variables_on_gpu << ", TOWERJIT_BUCKET_MB=" << bucket_mb);
    for (size_t k = 0; k < cpu_losses.size(); ++k) CHECK(gpu_losses[k] == Approx(cpu_losses[k]).epsilon(1e-4));
    for (const auto& [name, t] : cpu_vars)
      for (int64_t i = 0; i < t.size(); ++i)
        CHECK(gpu_vars.at(name).f32[i] == Approx(t.f32[i]).epsilon(1e-4).margin(1e-5));
  }
}

TEST_CASE("GPU: loss scaling on GPU towers skips the overflowed step and otherwise trains bitwise as without", "[gpu]") {
  // As tests/runtime/test_loss_scale_towers.cpp on CPU towers: a term of value 0 whose gradient
  // is `spike` per element of fc1's kernel overflows once scaled at one known step; scaling by a
  // power of two is exact, so every other step gives the unscaled run's bits. With the
  // variables on the host (the host apply) and on the GPUs (the apply and its check there).
  auto train = [](bool scaled, bool inject) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto image = tj::input("image", {kBatch, 784});
    auto label = tj::input("label", {kBatch}, tj::DType::i32);
    auto fc1 = tj::dense(image, 32, "fc1");
    auto logits = tj::dense(tj::relu(fc1), 10, "fc2");
    tj::Tensor kernel;
    for (const Tensor& v : tj::trainable_variables())
      if (v.node().attrs.name == "fc1/kernel") kernel = v;
    Tensor t = tj::mean(tj::input("spike", {kBatch})) * tj::sum(kernel);
    auto loss = tj::mean(tj::softmax_cross_entropy(logits, label)) + (t - tj::stop_gradient(t));
    const auto opt = tj::momentum(0.05, 0.9);
    tj::TowerTrainer trainer(g, loss, tj::Towers{tj::gpu(0), tj::gpu(0)},
                             scaled ? opt.with_loss_scale({.initial = 1024, .growth_interval = 2}) : opt);
    auto feeds = [](int k, float spike) {
      tj::HostFeeds f = batch_feeds(15, 700 + k);
      tj::HostTensor s({15});
      for (float& v : s.f32) v = spike;
      f["spike"] = s;
      return f;
    };
    for (int k = 0; k < 4; ++k) {
      if (inject && k == 2) trainer.step(feeds(k, 1e36f));
      trainer.step(feeds(k, 0));
    }
    return std::make_pair(trainer.variables(), trainer.loss_scale());
  };
  for (const char* variables_on_gpu : {"off", "on"}) {
    ::setenv("TOWERJIT_GPU_VARIABLES", variables_on_gpu, 1);
    const auto [plain, none] = train(false, false);
    const auto [scaled, report] = train(true, true);
    ::unsetenv("TOWERJIT_GPU_VARIABLES");
    INFO("TOWERJIT_GPU_VARIABLES=" << variables_on_gpu);
    CHECK(!none);
    REQUIRE(report);
    CHECK(report->skipped_steps == 1);
    CHECK(report->scale == 2048);  // 1024 -> 2048 -> (skip) 1024 -> 2048 -> one good step
    for (const auto& [name, t] : plain) {
      INFO("variable \"" << name << "\"");
      if (name == "global_step") continue;  // the skipped step counts in the scaled run
      CHECK(std::memcmp(t.data(), scaled.at(name).data(), t.size() * 4) == 0);
    }
    CHECK(scaled.at(tj::DynamicLossScale::kSkippedSteps).f32[0] == 1);
  }
}
