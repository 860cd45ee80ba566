// The CUDA runtime's host side on the fake driver (tests_gpu/fake_driver): what can be checked
// without a GPU. Devices, the caching allocator, copies through page-locked staging, a
// program's uploads, copies, downloads and written variables; which kernels a run launches,
// in what order, with which grid and which arguments (each buffer's device address, the batch,
// the step). Kernels do not run, so no computed value is checked here: the `gpu` tests do that.
//
// Hidden ([.fake_driver]): the ctest entry cuda_runtime_on_a_fake_driver runs them with the
// fake libcuda.so.1 first on LD_LIBRARY_PATH; against a real driver they would fail.
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jit/kir/kernel_ir.h"
#include "runtime/cuda/cuda_program.h"
#include "runtime/cuda/nccl.h"
#include "towerjit.h"

namespace tj = towerjit;
namespace cu = towerjit::cuda;
using tj::kBatch;

namespace {

// The stand-in runs no kernel, so a step's loss is whatever its memory held: not checked.
const tj::TowerTrainer::StepOptions kNoLossCheck{.check_loss = false};

// A stand-in library already loaded by the runtime, and its log functions.
struct StandIn {
  const char* library;
  void* handle = ::dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  template <typename F>
  F fn(const char* name) const {
    void* p = handle ? ::dlsym(handle, name) : nullptr;
    if (!p) throw std::runtime_error(std::string("not the stand-in ") + library + ": no " + name);
    return reinterpret_cast<F>(p);
  }
};

// The fake driver's log, through its tjfake_* functions.
struct Fake : StandIn {
  Fake() : StandIn{"libcuda.so.1"} {}
  void reset() const { fn<void (*)()>("tjfake_reset")(); }
  void expect_params(const std::string& kernel, int n) const {
    fn<void (*)(const char*, int)>("tjfake_set_param_count")(kernel.c_str(), n);
  }
  int launches() const { return fn<int (*)()>("tjfake_launch_count")(); }
  std::string kernel(int i) const { return fn<const char* (*)(int)>("tjfake_launch_kernel")(i); }
  unsigned grid(int i) const { return fn<unsigned (*)(int)>("tjfake_launch_grid")(i); }
  unsigned block(int i) const { return fn<unsigned (*)(int)>("tjfake_launch_block")(i); }
  int params(int i) const { return fn<int (*)(int)>("tjfake_launch_param_count")(i); }
  unsigned long long param(int i, int j) const { return fn<unsigned long long (*)(int, int)>("tjfake_launch_param")(i, j); }
  long long allocations() const { return fn<long long (*)()>("tjfake_allocations")(); }
};

tj::HostTensor values(tj::Shape shape, float from) {
  tj::HostTensor t(shape);
  for (size_t i = 0; i < t.f32.size(); ++i) t.f32[i] = from + static_cast<float>(i);
  return t;
}

// The tower tests' model, logits = x * w + b over 3 classes (no matrix product: cuBLAS does
// not start on the fake driver), and a trainer for it built while `env` is set (knobs are read
// when a trainer is built).
struct TinyTraining {
  tj::Graph graph;
  tj::Tensor logits, loss;
  std::unique_ptr<tj::TowerTrainer> trainer;
};

std::unique_ptr<TinyTraining> tiny_training(const tj::Towers& towers, const tj::Optimizer& optimizer,
                                            const std::vector<std::pair<const char*, const char*>>& env = {}) {
  auto m = std::make_unique<TinyTraining>();
  tj::GraphScope use(m->graph);
  auto x = tj::input("x", {kBatch, 3});
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  m->logits = x * tj::variable("w", {3}) + tj::variable("b", {3});
  m->loss = tj::mean(tj::softmax_cross_entropy(m->logits, labels));
  for (const auto& [name, value] : env) ::setenv(name, value, 1);
  m->trainer = std::make_unique<tj::TowerTrainer>(m->graph, m->loss, towers, optimizer,
                                                  tj::TowerTrainerOptions{.logits = m->logits});
  for (const auto& [name, value] : env) ::unsetenv(name);
  return m;
}

// Nine examples for it: x counting up, labels cycling over the classes.
tj::HostFeeds tiny_batch() {
  tj::HostTensor labels({9}, tj::DType::i32);
  for (int i = 0; i < 9; ++i) labels.i32[i] = i % 3;
  return {{"x", values({9, 3}, 0)}, {"labels", labels}};
}

// Kernels do not run here, so variables kept on the GPUs keep what was uploaded: restored
// values, then a step, must come back unchanged through the GPUs' copies.
void check_round_trip_through_gpus(tj::TowerTrainer& trainer) {
  tj::HostVariables moved = trainer.variables();
  for (auto& [name, t] : moved)
    for (float& v : t.f32) v = 0.25f;
  const int64_t applies = trainer.applies();
  trainer.restore(moved, applies);
  trainer.step(tiny_batch(), kNoLossCheck);
  for (const auto& [name, t] : trainer.variables())
    for (float v : t.f32) CHECK(v == 0.25f);
  CHECK(trainer.applies() == applies + 1);
}

}  // namespace

TEST_CASE("fake driver: a device, its allocator and copies through staging", "[.fake_driver]") {
  const Fake fake;
  REQUIRE(cu::cuda_device_count() == 1);
  cu::DeviceContext& dev = cu::device(0);
  CHECK(dev.str() == "gpu:0 (towerjit fake GPU, sm_90, 4 SMs, 1.0 GiB)");
  CHECK_THROWS_WITH(cu::device(1), Catch::Contains("no CUDA device gpu:1: this machine has 1 (gpu:0)"));
  const long long before = fake.allocations();
  cu::DeviceBuffer a = dev.allocate(3000);
  const CUdeviceptr p = a.ptr();
  a.reset();
  cu::DeviceBuffer b = dev.allocate(4096);  // the same size class: the cached block, no driver call
  CHECK(b.ptr() == p);
  CHECK(fake.allocations() == before + 1);

  cu::Stream stream(dev);
  const tj::HostTensor host = values({5, 3}, 0.5f);
  tj::DeviceTensor d = tj::to_device(host, dev, stream);
  tj::DeviceTensor e = tj::empty_device_tensor(dev, host.shape, host.dtype);
  cu::Event start(dev), end(dev);
  start.record(stream);
  cu::copy_async(e.ptr(), dev, d.ptr(), dev, d.bytes(), stream);
  end.record(stream);
  end.synchronize();
  CHECK(end.ready());
  CHECK(start.elapsed_ms(end) == 0.0f);
  CHECK(tj::to_host(e, stream).f32 == host.f32);
}

TEST_CASE("fake driver: a program's feeds and variables go up, update copies run, fetches come down", "[.fake_driver]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {2, 3});
  auto v = tj::variable("v", {2, 3}, {.init = tj::init::zeros(), .trainable = false});
  auto w = tj::variable("w", {4}, {.init = tj::init::zeros(), .trainable = false});
  tj::assign(v, x);  // a copy step: an input into a variable
  tj::CudaProgram p(g, {v, x, w}, /*run_update_ops=*/true);
  REQUIRE(p.program().kernels.empty());
  CHECK(p.written_variables() == std::vector<std::string>{"v"});
  const tj::HostFeeds feeds{{"x", values({2, 3}, 10)}};
  tj::HostVariables vars{{"v", values({2, 3}, 100)}, {"w", values({4}, 7)}};
  const auto out = p.run(feeds, vars);
  REQUIRE(out.size() == 3);
  CHECK(out[0].f32 == values({2, 3}, 100).f32);  // a fetched variable is its value before the step
  CHECK(out[1].f32 == feeds.at("x").f32);
  CHECK(out[2].f32 == values({4}, 7).f32);
  CHECK(vars.at("v").f32 == feeds.at("x").f32);    // written back
  CHECK(vars.at("w").f32 == values({4}, 7).f32);

  // The same with the variables kept on the device.
  tj::HostVariables start{{"v", values({2, 3}, 100)}, {"w", values({4}, 7)}};
  tj::DeviceVariables device = tj::to_device(start, p.device(), p.stream());
  const auto again = p.run(feeds, device);
  CHECK(again[0].f32 == values({2, 3}, 100).f32);
  CHECK(tj::to_host(device.at("v"), p.stream()).f32 == feeds.at("x").f32);

  // Errors name what is missing, before anything runs.
  tj::HostVariables missing{{"v", values({2, 3}, 0)}};
  CHECK_THROWS_WITH(p.run(feeds, missing), Catch::Contains("variable \"w\" f32[4] has no value"));
  CHECK_THROWS_WITH(p.run(tj::HostFeeds{}, vars), Catch::Contains("input \"x\" [2,3] was not fed"));
}

TEST_CASE("fake driver: kernels launch in order with each buffer's address, the batch and the step", "[.fake_driver]") {
  const Fake fake;
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 7});
  auto y = tj::dropout(tj::relu(x), 0.5, /*training=*/true, /*seed=*/3) * 2;  // random numbers: keyed by the step
  auto s = tj::sum(y * y, {1});  // a row reduction
  auto c = tj::sum(y, {0});      // a column reduction: split across blocks from 65 rows (8 a thread)
  tj::CudaProgram p(g, {y, s, c});
  REQUIRE(p.program().kernels.size() >= 1);
  // Reductions take three more parameters: the partials' workspace, the points per split and
  // the one-pass ticket.
  for (const auto& k : p.module().kernels) {
    const int n = static_cast<int>(k.buffers.size()) + (k.is_reduction() ? 5 : 2);
    fake.expect_params(k.symbol, n);
    if (k.may_split()) fake.expect_params(k.combine_symbol, n);
  }
  for (int64_t batch : {5, 300, 4099}) {
    tj::DeviceFeeds feeds;
    feeds.emplace("x", tj::to_device(values({batch, 7}, 0), p.device(), p.stream()));
    tj::DeviceVariables none;
    fake.reset();
    p.run(feeds, none, /*step=*/42);
    INFO("batch " << batch);
    // One launch per kernel, and a second (the combine pass) for each split reduction of many
    // outputs; the column's 7 are folded by its last block (one pass).
    int expected = 0, splits = 0;
    for (const auto& k : p.module().kernels) {
      const tj::cuda::Launch l = k.launch(batch, 4);
      expected += l.combine_grid > 0 ? 2 : 1;
      splits += l.splits > 1;
      CHECK(l.one_pass == (l.splits > 1));
    }
    CHECK(splits == (batch > 64 ? 1 : 0));  // the fake GPU has 4 SMs: only the column splits
    REQUIRE(fake.launches() == expected);
    int launch = 0;
    for (const auto& step : p.program().steps) {
      if (step.kind != tj::kir::Step::Kind::kernel) continue;
      const auto& k = p.module().kernels[step.index];
      const tj::cuda::Launch shape = k.launch(batch, 4);
      const int n = static_cast<int>(k.buffers.size());
      for (int pass = 0; pass < (shape.combine_grid > 0 ? 2 : 1); ++pass, ++launch) {
        CHECK(fake.kernel(launch) == (pass ? k.combine_symbol : k.symbol));
        CHECK(fake.block(launch) == static_cast<unsigned>(k.block));
        CHECK(fake.grid(launch) == static_cast<unsigned>(pass ? shape.combine_grid : shape.grid));
        REQUIRE(fake.params(launch) == n + (k.is_reduction() ? 5 : 2));
        for (int i = 0; i < n; ++i) {
          const auto& b = p.program().buffers[k.buffers[i]];
          CHECK(fake.param(launch, i) != 0);
          if (b.kind == tj::kir::Buffer::Kind::input) CHECK(fake.param(launch, i) == feeds.at("x").ptr());
        }
        CHECK(fake.param(launch, n) == static_cast<unsigned long long>(batch));
        // The step is read by the kernel from a device word (so a CUDA graph replays with each
        // run's step), written where a kernel draws random numbers; the fake's device memory is
        // host memory.
        const unsigned long long slot = fake.param(launch, n + 1);
        REQUIRE(slot != 0);
        unsigned long long step_value = 0;
        std::memcpy(&step_value, reinterpret_cast<const void*>(slot), sizeof step_value);
        CHECK(step_value == 42u);
        if (!k.is_reduction()) continue;
        CHECK((fake.param(launch, n + 2) != 0) == (shape.splits > 1));  // the workspace, when split
        CHECK(fake.param(launch, n + 3) == static_cast<unsigned long long>(shape.chunk));
        // The ticket, where one pass folds: a word holding 0 (the kernel leaves it so).
        const unsigned long long ticket = fake.param(launch, n + 4);
        REQUIRE((ticket != 0) == shape.one_pass);
        if (ticket) {
          unsigned ticket_value = ~0u;
          std::memcpy(&ticket_value, reinterpret_cast<const void*>(ticket), sizeof ticket_value);
          CHECK(ticket_value == 0u);
        }
      }
    }
  }
}

TEST_CASE("fake driver: library calls launch the library kernels, one_hot with its error slot", "[.fake_driver]") {
  const Fake fake;
  tj::Graph g;
  tj::GraphScope use(g);
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  auto x = tj::input("x", {kBatch, 3, 6, 6});
  auto hot = tj::one_hot(labels, 10);
  auto pooled = tj::max_pool2d(x, {.kernel = 2});
  auto padded = tj::pad(tj::input("p", {kBatch, 3}), {0, 1}, {0, 2});
  tj::CudaProgram p(g, {hot, pooled, padded});
  tj::HostTensor l(tj::Shape{4}, tj::DType::i32);
  l.i32 = {1, 2, 3, 9};
  const tj::HostFeeds feeds{{"labels", l}, {"x", values({4, 3, 6, 6}, 0)}, {"p", values({4, 3}, 0)}};
  tj::HostVariables none;
  fake.reset();
  CHECK_NOTHROW(p.run(feeds, none));  // the slot comes back all ones: no label out of range
  std::vector<std::string> launched;
  for (int i = 0; i < fake.launches(); ++i) launched.push_back(fake.kernel(i));
  CHECK(std::count(launched.begin(), launched.end(), "tj_one_hot") == 1);
  CHECK(std::count(launched.begin(), launched.end(), "tj_max_pool2d") == 1);
  CHECK(std::count(launched.begin(), launched.end(), "tj_pad") == 1);
}

TEST_CASE("fake driver: GPU towers, two sharing gpu:0 and one beside a CPU tower, run their steps",
          "[.fake_driver]") {
  // The plumbing of TowerTrainer with GPU towers: each tower's program compiles for gpu:0 and
  // runs on its own stream from its own thread, the fetched gradients come down, the CPU
  // all-reduces and applies. Kernels do not run here, so the values are not checked (the gpu
  // test "GPU towers train as CPU towers do" does that).
  const Fake fake;
  for (const tj::Towers& towers : {tj::Towers{tj::gpu(0), tj::gpu(0)}, tj::Towers{tj::cpu(0), tj::gpu(0)}}) {
    auto m = tiny_training(towers, tj::momentum(0.1, 0.9));
    fake.reset();
    const auto result = m->trainer->step(tiny_batch(), kNoLossCheck);
    CHECK(result.slices == std::vector<int64_t>{4, 5});
    CHECK(fake.launches() > 0);
    if (towers.devices()[0].kind == tj::DeviceKind::gpu)
      CHECK(fake.launches() % 2 == 0);  // the two GPU towers launch the same kernels
    CHECK(m->trainer->predict({{"x", values({9, 3}, 0)}}).shape == tj::Shape{9, 3});
  }
}

TEST_CASE("fake driver: sync GPU towers keeping the variables on the GPU reduce and apply there",
          "[.fake_driver]") {
  // TOWERJIT_GPU_VARIABLES=on: two towers share gpu:0, so the step is the towers' programs,
  // the in-device reduce program and the apply program, all launched on the GPU, with the
  // variables never crossing to the host until asked for. Kernels do not run here, so the
  // GPU's copy keeps what was uploaded: restore() then variables() must give it back through
  // the device (the gpu test "...variables kept on the GPU..." checks the numbers).
  const Fake fake;
  auto launches_per_step = [&](bool on_gpu) {
    auto m = tiny_training(tj::Towers{tj::gpu(0), tj::gpu(0)}, tj::momentum(0.1, 0.9),
                           {{"TOWERJIT_GPU_VARIABLES", on_gpu ? "on" : "off"}});
    fake.reset();
    CHECK(m->trainer->step(tiny_batch(), kNoLossCheck).slices == std::vector<int64_t>{4, 5});
    CHECK(m->trainer->applies() == 1);
    const int launched = fake.launches();
    if (on_gpu) {
      check_round_trip_through_gpus(*m->trainer);
      CHECK(m->trainer->predict({{"x", values({9, 3}, 0)}}).shape == tj::Shape{9, 3});
    }
    return launched;
  };
  const int on_host = launches_per_step(false), on_gpu = launches_per_step(true);
  INFO("launches per step: variables on the host " << on_host << ", on the GPU " << on_gpu);
  CHECK(on_gpu > on_host);  // the reduction and the apply run on the GPU
}

namespace {

// The fake NCCL's log (fake_driver/fake_nccl.cpp), through its tjnccl_* functions.
struct FakeNccl : StandIn {
  FakeNccl() : StandIn{"libnccl.so.2"} {}
  void reset() const { fn<void (*)()>("tjnccl_reset")(); }
  int calls() const { return fn<int (*)()>("tjnccl_calls")(); }
  int groups() const { return fn<int (*)()>("tjnccl_groups")(); }
  long long elements() const { return fn<long long (*)()>("tjnccl_elements")(); }
};

}  // namespace

TEST_CASE("fake driver, two GPUs: NCCL sums each GPU's buffers in place, in one group", "[.fake_two_gpus]") {
  REQUIRE(cu::cuda_device_count() == 2);
  REQUIRE(cu::nccl_available());
  cu::DeviceContext& d0 = cu::device(0);
  cu::DeviceContext& d1 = cu::device(1);
  const FakeNccl nccl;  // loaded by nccl_available() above
  cu::Stream s0(d0), s1(d1);
  tj::DeviceTensor a0 = tj::to_device(values({7}, 1), d0, s0), b0 = tj::to_device(values({2, 3}, 10), d0, s0);
  tj::DeviceTensor a1 = tj::to_device(values({7}, 100), d1, s1), b1 = tj::to_device(values({2, 3}, -10), d1, s1);
  cu::NcclCommunicators comms({&d0, &d1});
  CHECK(comms.size() == 2);
  nccl.reset();
  comms.all_reduce_sum({{{a0.ptr(), 7}, {b0.ptr(), 6}}, {{a1.ptr(), 7}, {b1.ptr(), 6}}}, {&s0, &s1}, "a test");
  CHECK(nccl.calls() == 4);
  CHECK(nccl.groups() == 1);
  for (const tj::DeviceTensor* a : {&a0, &a1}) {
    const tj::HostTensor h = tj::to_host(*a, s0);
    for (int i = 0; i < 7; ++i) CHECK(h.f32[i] == 101.0f + 2.0f * i);
  }
  for (const tj::DeviceTensor* b : {&b0, &b1}) {
    const tj::HostTensor h = tj::to_host(*b, s0);
    for (int i = 0; i < 6; ++i) CHECK(h.f32[i] == 2.0f * i);
  }
}

TEST_CASE("fake driver, two GPUs: sync towers with the variables on the GPUs all-reduce through NCCL",
          "[.fake_two_gpus]") {
  // TOWERJIT_GPU_VARIABLES=on over gpu:0 and gpu:1: the GPUs' gradient sums go through one
  // grouped NCCL all-reduce per bucket (w [3] and b [3]: two tensors on each of two ranks, one
  // bucket, or two with TOWERJIT_BUCKET_MB=0), or, with TOWERJIT_NCCL=off, through copies to
  // gpu:0 and back, with no NCCL call.
  const FakeNccl nccl;
  for (const char* use_nccl : {"on", "off"}) {
    for (const char* bucket_mb : {"25", "0"}) {
      auto m = tiny_training(tj::Towers{tj::gpu(0), tj::gpu(1)}, tj::adam(0.01),
                             {{"TOWERJIT_GPU_VARIABLES", "on"}, {"TOWERJIT_NCCL", use_nccl}, {"TOWERJIT_BUCKET_MB", bucket_mb}});
      nccl.reset();
      for (int k = 0; k < 3; ++k) CHECK(m->trainer->step(tiny_batch(), kNoLossCheck).slices == std::vector<int64_t>{4, 5});
      INFO("TOWERJIT_NCCL=" << use_nccl << ", TOWERJIT_BUCKET_MB=" << bucket_mb);
      const bool on = std::string(use_nccl) == "on";
      const int buckets = std::string(bucket_mb) == "0" ? 2 : 1;
      CHECK(nccl.groups() == (on ? 3 * buckets : 0));
      CHECK(nccl.calls() == (on ? 3 * 2 * 2 : 0));
      CHECK(nccl.elements() == (on ? 3 * 2 * 6 : 0));
      check_round_trip_through_gpus(*m->trainer);
    }
  }
}
