// towerjit_gpu_bench: what the CUDA backend does with a GPU's memory bandwidth and compute,
// one JSON line per figure on stdout ({"name", "value", "unit", "detail"}), progress on stderr.
// scripts/gpu-check.sh runs it and prints the lines as a table.
//
//   build/bench/towerjit_gpu_bench [--repeat 20] [--warmup 3] [--batch 4096] [--mib 256]
//
//   fused elementwise   relu(x * a + b) over [R, 1024] f32 (x --mib MiB): one fused kernel;
//                       its GB/s (bytes read + written over the kernel's time, by events),
//                       next to cuMemcpyDtoD of as many bytes, the copy engine's ceiling
//   Adam apply          Adam's update of one f32 variable of --mib MiB: the effective GB/s
//                       (w, m, v and the gradient read, w, m, v written: 7 x 4 bytes per
//                       parameter, over the apply's time), and what its kernels really move
//   mlp-large step      bench/train_step.h's 784-512-512-10 MLP, forward + backward + SGD
//                       momentum, at --batch, feeds and weights on the GPU: median ms per step
//   GPU towers          the same MLP through TowerTrainer at batch 1024, one tower and two
//                       towers sharing gpu:0; weights, all-reduce and apply on the CPU
//   host link           one batch of the MLP's images at --batch (784 f32 each) up to the GPU:
//                       from page-locked memory (cuMemcpyHtoDAsync, by events), from pageable
//                       memory (the same call, staged by the driver, then waited for: by the
//                       host's clock), and the host's memcpy of
//                       it into page-locked memory (what the feed prefetcher's thread does,
//                       runtime/towers/feed_prefetch.h): where a step fed from host memory
//                       spends the time its kernels do not
//
// Exits with 77 (and says why) where there is no CUDA device.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/train_step.h"
#include "dsl/error.h"
#include "jit/kir/kernel_ir.h"
#include "jit/kir/traffic.h"
#include "jit/reference/interpreter.h"
#include "runtime/cuda/cuda_program.h"
#include "towerjit.h"

namespace tj = towerjit;
namespace cu = towerjit::cuda;
using json = nlohmann::ordered_json;

namespace {

struct Options {
  int repeat = 20, warmup = 3;
  int64_t batch = 4096, mib = 256;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw tj::Error("towerjit_gpu_bench: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--repeat") o.repeat = std::stoi(value());
    else if (a == "--warmup") o.warmup = std::stoi(value());
    else if (a == "--batch") o.batch = std::stoll(value());
    else if (a == "--mib") o.mib = std::stoll(value());
    else throw tj::Error("towerjit_gpu_bench: unknown argument " + a + "; use --repeat N, --warmup N, --batch N, --mib N");
  }
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double round2(double v) { return std::round(v * 100) / 100; }

std::string fixed(double v, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// The bytes a program's loop kernels read and write at `batch` (jit/kir/traffic.h).
double kernel_bytes(const tj::kir::Program& p, int64_t batch) {
  double bytes = 0;
  for (const auto& k : p.kernels) bytes += static_cast<double>(tj::kir::bytes_moved(p, k).at(batch));
  return bytes;
}

void emit(const std::string& name, double value, const std::string& unit, const std::string& detail) {
  std::cout << json{{"name", name}, {"value", round2(value)}, {"unit", unit}, {"detail", detail}}.dump() << std::endl;
}

// A tensor of uniform values in [0, 1) on the program's device.
tj::DeviceTensor device_values(const tj::Shape& shape, tj::CudaProgram& p, uint32_t seed) {
  tj::HostTensor h(shape);
  uint32_t s = seed;
  for (float& v : h.f32) s = s * 1664525u + 1013904223u, v = static_cast<float>(s >> 8) / (1 << 24);
  return tj::to_device(h, p.device(), p.stream());
}

// Median over `repeat` runs of the summed GPU time of the program's steps (events).
double median_program_ms(tj::CudaProgram& p, const tj::DeviceFeeds& feeds, tj::DeviceVariables& vars, const Options& o) {
  std::vector<double> times;
  for (int r = 0; r < o.warmup + o.repeat; ++r) {
    std::vector<double> steps;
    p.step_times = &steps;
    p.run(feeds, vars, r);
    p.step_times = nullptr;
    double total = 0;
    for (double t : steps) total += t;
    if (r >= o.warmup) times.push_back(total);
  }
  return median(times);
}

// relu(x * a + b) over [rows, 1024], written into a variable (no fetch to copy back): one
// fused elementwise kernel reading x and writing the result, 2 * 4 bytes per element; then
// cuMemcpyDtoD of as many bytes, which reads and writes as much.
void fused_elementwise(const Options& o, const std::string& device) {
  const int64_t cols = 1024, rows = o.mib * (1 << 20) / 4 / cols, n = rows * cols;
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {rows, cols});
  auto a = tj::input("a", {cols});
  auto b = tj::input("b", {cols});
  auto out = tj::variable("out", {rows, cols}, {.init = tj::init::zeros(), .trainable = false});
  tj::assign(out, tj::relu(x * a + b));
  tj::CudaProgram elementwise(g, std::vector<tj::Tensor>{}, /*run_update_ops=*/true);
  tj::DeviceFeeds feeds;
  feeds.emplace("x", device_values({rows, cols}, elementwise, 1));
  feeds.emplace("a", device_values({cols}, elementwise, 2));
  feeds.emplace("b", device_values({cols}, elementwise, 3));
  tj::DeviceVariables vars;
  vars.emplace("out", tj::empty_device_tensor(elementwise.device(), {rows, cols}, tj::DType::f32));
  const double bytes = 2.0 * n * 4, kernel_ms = median_program_ms(elementwise, feeds, vars, o);
  const double kernel_gbs = bytes / kernel_ms / 1e6;
  emit("fused elementwise", kernel_gbs, "GB/s",
       std::to_string(elementwise.program().kernels.size()) + " kernel(s), " +
           std::to_string(elementwise.program().copies.size()) + " copies, " + std::to_string(n) +
           " f32 in and out, " + fixed(kernel_ms) + " ms; " + device);

  cu::DeviceContext& dev = elementwise.device();
  cu::DeviceBuffer src = dev.allocate(n * 4), dst = dev.allocate(n * 4);
  cu::Event start(dev), end(dev);
  std::vector<double> copies;
  for (int r = 0; r < o.warmup + o.repeat; ++r) {
    start.record(elementwise.stream());
    cu::copy_async(dst.ptr(), dev, src.ptr(), dev, n * 4, elementwise.stream());
    end.record(elementwise.stream());
    end.synchronize();
    if (r >= o.warmup) copies.push_back(start.elapsed_ms(end));
  }
  const double copy_gbs = bytes / median(copies) / 1e6;
  emit("cuMemcpyDtoD", copy_gbs, "GB/s", std::to_string(n * 4) + " bytes read and written; " + device);
  emit("fused elementwise / copy", 100.0 * kernel_gbs / copy_gbs, "%", "the fused kernel's share of the copy's bandwidth");
}

// Adam on one variable of n floats: the apply's kernels read w, m, v, g and write w, m, v.
void optimiser_apply(const Options& o, const std::string& device) {
  const int64_t n = o.mib * (1 << 20) / 4;
  tj::Graph g;
  tj::GraphScope use(g);
  auto w = tj::variable("w", {n}, {.init = tj::init::zeros()});
  auto grad = tj::input("grad", {n});
  tj::adam(1e-3).apply({grad}, {w});
  tj::CudaProgram p(g, std::vector<tj::Tensor>{}, /*run_update_ops=*/true);
  tj::DeviceFeeds feeds;
  feeds.emplace("grad", device_values({n}, p, 4));
  tj::HostVariables host;
  for (const auto& [name, a] : tj::reference::initialize_variables(g, 1)) {
    tj::HostTensor t(a.shape, a.dtype);
    for (int64_t i = 0; i < a.size(); ++i) {  // the global step is an i32 variable
      if (a.dtype == tj::DType::f32) t.f32[i] = static_cast<float>(a[i]);
      else t.i32[i] = static_cast<int32_t>(a[i]);
    }
    host[name] = std::move(t);
  }
  tj::DeviceVariables vars = tj::to_device(host, p.device(), p.stream());
  const double ms = median_program_ms(p, feeds, vars, o);
  const double ideal = 7.0 * n * 4, moved = kernel_bytes(p.program(), 1);
  emit("Adam apply", ideal / ms / 1e6, "GB/s",
       "effective (7 x 4 bytes per parameter); " + std::to_string(p.program().kernels.size()) + " kernels moving " +
           fixed(moved / ideal, 2) + "x that: " + fixed(moved / ms / 1e6, 1) + " GB/s actual, " + std::to_string(n) +
           " f32 parameters, " + fixed(ms) + " ms; " + device);
}

// The mlp-large training step at o.batch with everything on the GPU: ms per step (wall
// clock; a run ends when its loss is back on the host).
void mlp_step(const Options& o, const std::string& device) {
  tj::bench::TrainStep s = tj::bench::build_train_step("mlp-large");
  s.batch = o.batch;
  s.image = tj::Shape{o.batch, 784};
  tj::CudaProgram p(*s.graph, {s.loss}, /*run_update_ops=*/true);
  tj::DeviceFeeds feeds;
  for (const auto& [name, t] : tj::bench::random_feeds(s, 1)) feeds.emplace(name, tj::to_device(t, p.device(), p.stream()));
  tj::DeviceVariables vars = tj::to_device(tj::bench::initial_variables(s, 1), p.device(), p.stream());
  std::vector<double> times;
  for (int r = 0; r < o.warmup + o.repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    p.run(feeds, vars, r);
    if (r >= o.warmup)
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  const double ms = median(times);
  emit("mlp-large step, batch " + std::to_string(o.batch), ms, "ms/step",
       std::to_string(p.program().kernels.size()) + " kernels, " + std::to_string(p.program().calls.size()) +
           " library calls; " + std::to_string(static_cast<int64_t>(o.batch / ms * 1000)) + " samples/s; " + device);
}

// GPU towers through TowerTrainer: the 784-512-512-10 MLP at a batch of 1024 over one tower
// and over two towers sharing gpu:0 (each on its own stream). With the variables on the host,
// the all-reduce and the apply are on the CPU, so each step also moves the weights up and the
// gradients down; with TowerStrategyOptions::gpu_variables they stay on the GPU, which reduces and
// applies: ms per step, wall clock.
void gpu_towers(const Options& o, const std::string& device) {
  const int64_t batch = 1024;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  tj::HostTensor image(tj::Shape{batch, 784}), label(tj::Shape{batch}, tj::DType::i32);
  for (float& v : image.f32) v = pixel(rng);
  for (int32_t& v : label.i32) v = static_cast<int32_t>(rng() % 10);
  const tj::HostFeeds feeds{{"image", image}, {"label", label}};
  for (const bool resident : {false, true}) {
    for (int towers : {1, 2}) {
      tj::Graph g;
      tj::GraphScope use(g);
      auto x = tj::input("image", {tj::kBatch, 784});
      auto y = tj::input("label", {tj::kBatch}, tj::DType::i32);
      auto h = tj::relu(tj::dense(tj::relu(tj::dense(x, 512, "fc1")), 512, "fc2"));
      auto loss = tj::mean(tj::softmax_cross_entropy(tj::dense(h, 10, "logits"), y));
      tj::TowerTrainer trainer(g, loss, tj::Towers(std::vector<tj::Device>(towers, tj::gpu(0))), tj::momentum(0.05, 0.9),
                               {.strategy = {.gpu_variables = resident}});
      std::vector<double> times;
      for (int r = 0; r < o.warmup + o.repeat; ++r) {
        const auto start = std::chrono::steady_clock::now();
        trainer.step(feeds);
        if (r >= o.warmup)
          times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      }
      const double ms = median(times);
      emit("mlp-large, " + std::to_string(towers) + " tower(s) on gpu:0, batch 1024" +
               (resident ? ", variables on the GPU" : ""),
           ms, "ms/step",
           std::to_string(static_cast<int64_t>(batch / ms * 1000)) + " samples/s; TowerTrainer, " +
               (resident ? "reduction and apply on the GPU" : "variables, all-reduce and apply on the CPU") + "; " +
               device);
    }
  }
}

// One batch of the MLP's images up to the GPU, three ways (see the top of the file).
void host_link(const Options& o, const std::string& device) {
  const size_t bytes = static_cast<size_t>(o.batch) * 784 * 4;
  cu::DeviceContext& dev = cu::device(0);
  dev.make_current();
  const cu::DriverApi& api = cu::require_driver();
  cu::Stream stream(dev);
  cu::Event start(dev), end(dev);
  cu::DeviceBuffer to = dev.allocate(bytes);
  cu::PinnedBuffer pinned(dev.context());
  char* locked = pinned.reserve(bytes);
  std::vector<char> pageable(bytes, 1);
  std::memset(locked, 1, bytes);
  std::vector<double> pinned_ms, pageable_ms, memcpy_ms;
  using Clock = std::chrono::steady_clock;
  for (int r = 0; r < o.warmup + o.repeat; ++r) {
    start.record(stream);
    cu::check_cuda(api.MemcpyHtoDAsync(to.ptr(), locked, bytes, stream.handle()), "cuMemcpyHtoDAsync");
    end.record(stream);
    end.synchronize();
    auto t0 = Clock::now();
    cu::check_cuda(api.MemcpyHtoDAsync(to.ptr(), pageable.data(), bytes, stream.handle()), "cuMemcpyHtoDAsync");
    stream.synchronize();
    const double pageable_t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    t0 = Clock::now();
    std::memcpy(locked, pageable.data(), bytes);
    const double memcpy_t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (r < o.warmup) continue;
    pinned_ms.push_back(start.elapsed_ms(end));
    pageable_ms.push_back(pageable_t);
    memcpy_ms.push_back(memcpy_t);
  }
  const std::string what = std::to_string(bytes) + " bytes (batch " + std::to_string(o.batch) + " of 784 f32)";
  emit("host to GPU, page-locked", bytes / median(pinned_ms) / 1e6, "GB/s", what + ", " + fixed(median(pinned_ms)) + " ms; " + device);
  emit("host to GPU, pageable", bytes / median(pageable_ms) / 1e6, "GB/s", what + ", " + fixed(median(pageable_ms)) + " ms; " + device);
  emit("memcpy into page-locked memory", bytes / median(memcpy_ms) / 1e6, "GB/s",
       what + ", one thread, " + fixed(median(memcpy_ms)) + " ms; " + device);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    if (!cu::cuda_available()) {
      std::fprintf(stderr, "towerjit_gpu_bench: skipped: no CUDA device (%s)\n", cu::cuda_unavailable_reason().c_str());
      return 77;
    }
    const std::string device = cu::device(0).str();
    std::cerr << "towerjit_gpu_bench on " << device << "\n";
    fused_elementwise(o, device);
    optimiser_apply(o, device);
    mlp_step(o, device);
    gpu_towers(o, device);
    host_link(o, device);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
