#include "bench/gpu_model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>

#include "dsl/error.h"
#include "examples/gpt.h"
#include "examples/models.h"
#include "jit/knobs.h"
#include "runtime/cost/recorded_step.h"
#include "runtime/cuda/conv_choice.h"
#include "runtime/cuda/cudnn.h"

namespace towerjit::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Layers of the example's models, counted from examples/models.h: mlp 3 dense; cnn 2 conv,
// 2 pools, 2 dense; resnet 5 conv, 5 batch norms, 2 pools, 1 dense.
// gpt: the gpt-small bench case (examples/gpt.h): an embedding, 2 blocks of 2 layer norms, 4
// dense projections, the fused attention and a 2-layer MLP, a final layer norm: 20.
int layers_of(const std::string& workload) {
  return workload == "mlp" ? 3 : workload == "cnn" ? 6 : workload == "gpt" ? 20 : 13;
}

// towerjit_bench --workload gpt-small's model (bench/train_step.cpp).
const examples::GptConfig kGpt{.vocab = 86, .context = 64, .dim = 64, .heads = 4, .layers = 2};

HostFeeds gpt_feeds_of(int64_t batch) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(kGpt.vocab) - 1);
  HostTensor tokens(Shape{batch, kGpt.context}, DType::i32), targets(Shape{batch, kGpt.context}, DType::i32);
  for (int32_t& v : tokens.i32) v = token(rng);
  for (int32_t& v : targets.i32) v = token(rng);
  return {{"tokens", std::move(tokens)}, {"targets", std::move(targets)}};
}

HostFeeds feeds_of(int64_t batch) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> klass(0, 9);
  HostTensor image(Shape{batch, 784}), label(Shape{batch}, DType::i32);
  for (float& v : image.f32) v = pixel(rng);
  for (int32_t& v : label.i32) v = klass(rng);
  return {{"image", std::move(image)}, {"label", std::move(label)}};
}

// The example's model `workload` on gpu:0 as fashion_mnist trains it (Adam at 1e-3, seed 1),
// with the variables on the GPU (the configuration): the graph and its trainer.
struct WorkloadTrainer {
  Graph graph;
  std::unique_ptr<TowerTrainer> trainer;
  WorkloadTrainer(const std::string& workload, DType precision, bool prefetch_feeds = true) {
    GraphScope use(graph);
    const TowerStrategyOptions strategy{.gpu_variables = true, .prefetch_feeds = prefetch_feeds};
    // --precision bf16|f16: the products' operands in 16 bits (the precision policy on the tower).
    const Towers towers = Towers({towerjit::gpu(0)}).precision({.matmul_operands = precision});
    if (workload == "gpt") {
      auto logits = examples::gpt(input("tokens", {kBatch, kGpt.context}, DType::i32), kGpt);
      auto loss = mean(softmax_cross_entropy(logits, input("targets", {kBatch, kGpt.context}, DType::i32)));
      trainer = std::make_unique<TowerTrainer>(graph, loss, towers, adam(1e-3),
                                               TowerTrainerOptions{.seed = 1, .strategy = strategy});
      return;
    }
    auto image = input("image", {kBatch, 784});
    auto label = input("label", {kBatch}, DType::i32);
    auto logits = workload == "cnn"      ? examples::cnn(image)
                  : workload == "resnet" ? examples::resnet(image)
                                         : examples::mlp(image, 512);
    auto loss = mean(softmax_cross_entropy(logits, label));
    trainer = std::make_unique<TowerTrainer>(graph, loss, towers, adam(1e-3),
                                             TowerTrainerOptions{.seed = 1, .logits = logits, .strategy = strategy});
  }
};

}  // namespace

int64_t default_batch(const std::string& workload) {
  return workload == "mlp" ? 4096 : workload == "gpt" ? 32 : 512;
}

ModelledStep record_workload(const cost::GpuSpec& gpu, const std::string& workload, int64_t batch, DType precision) {
  if (workload != "mlp" && workload != "cnn" && workload != "resnet" && workload != "gpt")
    throw Error("towerjit_bench: --workload " + workload + " is not a model of the GPU cost model; use mlp, cnn, resnet or gpt");
  ModelledStep m{.workload = workload, .batch = batch > 0 ? batch : default_batch(workload), .layers = layers_of(workload)};
  std::string tmpl = (std::filesystem::temp_directory_path() / "towerjit-gpu-model-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw Error("towerjit_bench: cannot create a temporary directory for the dumps");
  cost::prepare_emulated_gpu(gpu, tmpl);

  WorkloadTrainer w(workload, precision);
  const HostFeeds feeds = workload == "gpt" ? gpt_feeds_of(m.batch) : feeds_of(m.batch);
  auto t0 = Clock::now();
  w.trainer->step(feeds);
  m.warmup_seconds = seconds_since(t0);
  t0 = Clock::now();
  m.launches = cost::record_step(*w.trainer, feeds, tmpl, m.batch);
  m.record_seconds = seconds_since(t0);
  unsetenv("TOWERJIT_DUMP");  // programs compiled later are not this step's
  std::filesystem::remove_all(tmpl);
  return m;
}

namespace {

// --measure N on a real GPU: the same step, timed (median of N steps after 3 warm-up steps,
// each step waited for: TowerTrainer::step returns the loss).
int measure(const std::string& workload, int64_t batch, int steps, DType precision, bool tf32) {
  batch = batch > 0 ? batch : default_batch(workload);
  WorkloadTrainer w(workload, precision);
  const HostFeeds feeds = workload == "gpt" ? gpt_feeds_of(batch) : feeds_of(batch);
  for (int i = 0; i < 3; ++i) w.trainer->step(feeds);
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    w.trainer->step(feeds);
    ms.push_back(seconds_since(t0) * 1e3);
  }
  std::sort(ms.begin(), ms.end());
  // Which convolution passes went to towerjit's implicit GEMM, timed beside cuDNN's algorithms
  // (runtime/cuda/conv_choice.h): choices of this process so far.
  const cuda::ConvChoiceCounts convs = cuda::conv_choice_counts();
  std::printf("{\"workload\":\"%s\",\"batch\":%lld,\"precision\":\"%s\",\"tf32\":%s,\"cudnn\":%s,"
              "\"conv_implicit_gemm\":%s,\"conv_choices\":%lld,\"conv_choices_implicit_gemm\":%lld,"
              "\"measured_ms\":%.4f,\"min_ms\":%.4f,\"steps\":%d}\n",
              workload.c_str(), static_cast<long long>(batch), std::string(dtype_name(precision)).c_str(), tf32 ? "true" : "false",
              cuda::cudnn_available() ? "true" : "false", knobs::conv_implicit_gemm() ? "true" : "false",
              static_cast<long long>(convs.made),
              static_cast<long long>(convs.implicit_gemm), ms[ms.size() / 2], ms.front(), steps);
  return 0;
}

// --measure-fit N on a real GPU: fit() over a dataset in host memory (4 batches of random
// examples, shuffled, gathered by 4 pipeline threads), N steps after 3 warm-up steps, with each
// batch copied to the GPU while the step before trains (TOWERJIT_PREFETCH_FEEDS, the default)
// and without: the time a step takes as a training loop sees it, host copies included.
int measure_fit(const std::string& workload, int64_t batch, int steps, DType precision, bool tf32) {
  batch = batch > 0 ? batch : default_batch(workload);
  const data::TensorDataset data(workload == "gpt" ? gpt_feeds_of(4 * batch) : feeds_of(4 * batch));
  for (bool prefetch : {false, true}) {
    WorkloadTrainer w(workload, precision, prefetch);
    data::BatchPipeline batches(data, {.batch = batch, .threads = 4, .depth = 4});
    fit(*w.trainer, batches, {.max_steps = 3, .stop_on_signals = false});
    const auto t0 = Clock::now();
    fit(*w.trainer, batches, {.max_steps = 3 + steps, .stop_on_signals = false});
    const double ms = seconds_since(t0) * 1e3 / steps;
    std::printf("{\"workload\":\"%s\",\"batch\":%lld,\"precision\":\"%s\",\"tf32\":%s,\"fit_ms_per_step\":%.4f,"
                "\"prefetch_feeds\":%s,\"steps\":%d}\n",
                workload.c_str(), static_cast<long long>(batch), std::string(dtype_name(precision)).c_str(),
                tf32 ? "true" : "false", ms, prefetch ? "true" : "false", steps);
  }
  return 0;
}

}  // namespace

int gpu_model_main(int argc, char** argv) {
  std::string gpu_name, workload = "mlp";
  int64_t batch = 0;
  cost::ModelOptions options;
  int top = 15, measure_steps = 0, measure_fit_steps = 0;
  DType precision = DType::f32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("towerjit_bench: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--gpu-model") gpu_name = value();
    else if (a == "--workload") workload = value();
    else if (a == "--batch") {
      const std::string v = value();
      char* end = nullptr;
      batch = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || batch < 1)
        throw Error("towerjit_bench: --batch " + v + " is not a batch size; give a whole number of at least 1");
    }
    else if (a == "--graph") options.graph = true;
    else if (a == "--tf32") options.tf32 = true;
    else if (a == "--precision") {
      const std::string v = value();
      const std::optional<DType> t = dtype_from_name(v);
      if (!t || *t == DType::i32) throw Error("towerjit_bench: --precision " + v + " is not f32, bf16 or f16");
      precision = *t;
    }
    else if (a == "--top") top = std::stoi(value());
    else if (a == "--measure") measure_steps = std::max(1, std::stoi(value()));
    else if (a == "--measure-fit") measure_fit_steps = std::max(1, std::stoi(value()));
    else throw Error("towerjit_bench --gpu-model: unknown argument " + a +
                     "; use --gpu-model GPU --workload mlp|cnn|resnet|gpt [--batch N] [--graph] [--tf32] [--precision f32|bf16|f16] [--top N] "
                     "[--measure STEPS] [--measure-fit STEPS]");
  }
  // The step that runs, measured or priced: with --tf32, cuBLASLt and cuDNN in TF32.
  if (options.tf32) setenv("TOWERJIT_ALLOW_TF32", "on", 1);
  if (measure_steps > 0) return measure(workload, batch, measure_steps, precision, options.tf32);
  if (measure_fit_steps > 0) return measure_fit(workload, batch, measure_fit_steps, precision, options.tf32);
  const cost::GpuSpec& gpu = cost::gpu_spec(gpu_name);
  const ModelledStep m = record_workload(gpu, workload, batch, precision);
  const cost::StepPrediction p = cost::predict_step(gpu, m.launches, options);

  std::printf("towerjit GPU cost model: %s, batch %lld, on %s (%d SMs, %.0f GB/s achievable, %.1f TFLOP/s %s)%s\n",
              workload.c_str(), static_cast<long long>(m.batch), gpu.description.c_str(), gpu.sms,
              gpu.hbm_achievable_gbps, options.tf32 ? gpu.tf32_tflops : gpu.fp32_tflops, options.tf32 ? "TF32" : "FP32",
              options.graph ? ", every launch priced as a CUDA graph node (--graph)" : "");
  if (precision != DType::f32)
    std::printf("precision policy: %s matrix-product operands, at the %.1f TFLOP/s BF16/FP16 tensor-core peak\n",
                std::string(dtype_name(precision)).c_str(), gpu.bf16_tflops);
  double points = 0, gemm_flops = 0;
  for (const cost::Launch& l : m.launches) {
    if (l.kind == "kernel") points += l.points();
    if (l.kind == "library") gemm_flops += l.flops;
  }
  std::printf("emulator: first step %.1f s (compiles included), recorded step %.1f s: %.3g kernel points "
              "(%.0f ns a point if they took it all) and %.3g GEMM FLOPs on OpenBLAS\n",
              m.warmup_seconds, m.record_seconds, points, points > 0 ? m.record_seconds * 1e9 / points : 0.0, gemm_flops);
  // The launches, most expensive first, those of one name together.
  struct Row {
    std::string name, bound;
    int count = 0;
    double us = 0, bytes = 0, flops = 0;
    int64_t blocks = 0, threads = 0;
    uint64_t work_max = 0;
  };
  std::map<std::string, Row> rows;
  for (size_t i = 0; i < m.launches.size(); ++i) {
    const cost::Launch& l = m.launches[i];
    const std::string key = l.module.empty() ? l.name : l.module + "/" + l.name;
    Row& r = rows[key];
    r.name = key;
    r.count++;
    r.us += p.launches[i].us;
    r.bytes += l.bytes;
    r.flops += l.flops;
    r.blocks = std::max(r.blocks, l.blocks);
    r.threads = l.threads_per_block;
    r.work_max = std::max(r.work_max, l.work_max);
    r.bound = p.launches[i].bound;
  }
  std::vector<Row> sorted;
  for (auto& [k, r] : rows) sorted.push_back(r);
  std::sort(sorted.begin(), sorted.end(), [](const Row& a, const Row& b) { return a.us > b.us; });
  std::printf("\n%-52s %6s %10s %10s %9s %9s %10s  %s\n", "launch (program/kernel)", "count", "pred us", "MB",
              "GFLOP", "grid", "work max", "bound");
  for (int i = 0; i < std::min<int>(top, static_cast<int>(sorted.size())); ++i) {
    const Row& r = sorted[i];
    std::printf("%-52s %6d %10.1f %10.2f %9.3f %9lld %10llu  %s\n", r.name.substr(0, 52).c_str(), r.count, r.us,
                r.bytes / 1e6, r.flops / 1e9, static_cast<long long>(r.blocks),
                static_cast<unsigned long long>(r.work_max), r.bound.c_str());
  }
  if (static_cast<int>(sorted.size()) > top) std::printf("... %zu more (--top N)\n", sorted.size() - top);
  std::printf("\npredicted step (device): %.3f ms, of which launch overheads %.3f ms\n", p.device_us / 1e3,
              p.overhead_us / 1e3);
  {
    double narrow_us = 0, gemm_us = 0;
    int narrow = 0, gemms = 0;
    for (size_t i = 0; i < m.launches.size(); ++i) {
      const cost::Launch& l = m.launches[i];
      if (l.kind == "kernel" && l.blocks < gpu.sms) narrow++, narrow_us += p.launches[i].us;
      if (l.kind == "library") gemms++, gemm_us += p.launches[i].us;
    }
    std::printf("  kernels on fewer blocks than SMs: %d, %.3f ms; library calls: %d, %.3f ms\n", narrow, narrow_us / 1e3,
                gemms, gemm_us / 1e3);
  }
  std::printf("host link copies:        %.3f ms (feeds and fetches; not in the step's ratio)\n", p.host_link_us / 1e3);
  std::printf("roofline floor:          %.3f ms (%.1f MB, %.2f GFLOP)\n", p.floor_us / 1e3, p.bytes / 1e6, p.flops / 1e9);
  std::printf("step / floor:            %.2f\n", p.ratio());
  std::printf("launches a step:         %lld (%d layers: %.1f a layer), %lld of them replayed from CUDA graphs\n",
              static_cast<long long>(p.launches_count), m.layers, static_cast<double>(p.launches_count) / m.layers,
              static_cast<long long>(std::count_if(m.launches.begin(), m.launches.end(),
                                                   [](const cost::Launch& l) { return l.graph; })));
  std::printf("{\"workload\":\"%s\",\"gpu\":\"%s\",\"precision\":\"%s\",\"batch\":%lld,\"step_ms\":%.4f,\"host_link_ms\":%.4f,\"floor_ms\":%.4f,"
              "\"ratio\":%.3f,\"launches\":%lld,\"emulator_s\":%.1f}\n",
              workload.c_str(), gpu.name.c_str(), std::string(dtype_name(precision)).c_str(),
              static_cast<long long>(m.batch), p.device_us / 1e3,
              p.host_link_us / 1e3, p.floor_us / 1e3, p.ratio(), static_cast<long long>(p.launches_count),
              m.record_seconds);
  return 0;
}

}  // namespace towerjit::bench
