// A program's runs as CUDA graphs (runtime/cuda/program_graphs.h): a replayed run gives the
// bits an uncaptured one gives (dropout included, whose step the kernels read from device
// memory at every replay); each batch size is captured once and replayed after; a
// synchronising call made while a run is captured is an error naming the call and the
// program; and fit() over epochs whose last batch is smaller captures in the first epoch only
// (in the first two with each batch prefetched into one of two slots, whose addresses differ).
#include <cstring>
#include <random>

#include "gpu_check.h"
#include "tests/jit/cpu_test_env.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::testing::batch_feeds;
using tj::testing::initial;
using tj::kBatch;
using tj::Tensor;

namespace {

// 784-32-10 with dropout (keyed by the step), mean cross-entropy, SGD momentum as update ops.
struct DropoutMlp {
  tj::Graph graph;
  Tensor loss;
  DropoutMlp() {
    tj::GraphScope use(graph);
    auto image = tj::input("image", {kBatch, 784});
    auto label = tj::input("label", {kBatch}, tj::DType::i32);
    auto h = tj::dropout(tj::relu(tj::dense(image, 32, "fc1")), 0.5, /*training=*/true, /*seed=*/11);
    loss = tj::mean(tj::softmax_cross_entropy(tj::dense(h, 10, "fc2"), label));
    auto vars = tj::trainable_variables();
    tj::momentum(0.05, 0.9).apply(tj::grad(loss, vars), vars);
  }
};

// The same without update ops, for a trainer (whose optimiser is its own).
struct DropoutClassifier {
  tj::Graph graph;
  Tensor loss;
  DropoutClassifier() {
    tj::GraphScope use(graph);
    auto image = tj::input("image", {kBatch, 784});
    auto label = tj::input("label", {kBatch}, tj::DType::i32);
    auto h = tj::dropout(tj::relu(tj::dense(image, 32, "fc1")), 0.5, /*training=*/true, /*seed=*/11);
    loss = tj::mean(tj::softmax_cross_entropy(tj::dense(h, 10, "fc2"), label));
  }
};

struct Trained {
  std::vector<float> losses;
  tj::HostVariables variables;
  tj::CudaProgram::GraphCounts counts;
};

// Steps 0.. of the dropout MLP on batches of `sizes`, the weights kept on the device.
Trained train(const std::vector<int64_t>& sizes, bool graphs) {
  tj::test::ScopedEnv knob("TOWERJIT_CUDA_GRAPHS", graphs ? "on" : "off");
  DropoutMlp m;
  tj::CudaProgram step(m.graph, {m.loss}, /*run_update_ops=*/true);
  tj::DeviceVariables vars = tj::to_device(initial(m.graph), step.device(), step.stream());
  Trained t;
  for (size_t k = 0; k < sizes.size(); ++k)
    t.losses.push_back(step.run(batch_feeds(sizes[k], 40 + static_cast<uint32_t>(k)), vars, k)[0].f32[0]);
  t.variables = tj::to_host(vars, step.stream());
  t.counts = step.graph_counts();
  return t;
}

bool same_bits(const tj::HostVariables& a, const tj::HostVariables& b) {
  for (const auto& [name, t] : b)
    if (std::memcmp(a.at(name).data(), t.data(), t.size() * 4) != 0) return false;
  return a.size() == b.size();
}

}  // namespace

TEST_CASE("GPU: a replayed step gives the bits of an uncaptured one, dropout's step included", "[gpu]") {
  const std::vector<int64_t> sizes(6, 7);
  const Trained captured = train(sizes, true), uncaptured = train(sizes, false);
  CHECK(captured.counts.captures == 1);
  CHECK(captured.counts.replays == 6);
  CHECK(captured.counts.uncaptured == 0);
  CHECK(uncaptured.counts.captures == 0);
  CHECK(uncaptured.counts.uncaptured == 6);
  CHECK(captured.losses == uncaptured.losses);
  CHECK(same_bits(captured.variables, uncaptured.variables));
}

// The step word's high half is written only when it changes: one program run at steps whose
// high halves go up, back down and up again draws the dropout masks a fresh program draws at
// each (the forward pass alone, so the weights do not change between runs).
TEST_CASE("GPU: the step keying dropout reaches the kernels whole, its high half written when it changes", "[gpu]") {
  DropoutMlp m;
  const tj::HostVariables weights = initial(m.graph);
  const tj::HostFeeds feeds = batch_feeds(7, 3);
  auto loss_at = [&](tj::CudaProgram& p, uint64_t step) {
    tj::HostVariables vars = weights;
    return p.run(feeds, vars, step)[0].f32[0];
  };
  tj::CudaProgram kept(m.graph, {m.loss});
  const uint64_t high = uint64_t{1} << 32;
  for (uint64_t step : {uint64_t{5}, high + 5, uint64_t{5}, 2 * high + 5, 2 * high + 6, uint64_t{6}}) {
    INFO("step " << step);
    tj::CudaProgram fresh(m.graph, {m.loss});
    CHECK(loss_at(kept, step) == loss_at(fresh, step));
  }
  tj::CudaProgram a(m.graph, {m.loss}), b(m.graph, {m.loss});
  CHECK(loss_at(a, 5) != loss_at(b, high + 5));  // the high half keys the masks
}

TEST_CASE("GPU: each batch size is captured once, then replayed", "[gpu]") {
  // The full batch, the last smaller one, again both (a second epoch), then a batch of 1.
  const std::vector<int64_t> sizes = {8, 8, 3, 8, 3, 1, 8};
  const Trained captured = train(sizes, true), uncaptured = train(sizes, false);
  CHECK(captured.counts.captures == 3);
  CHECK(captured.counts.replays == 7);
  CHECK(captured.losses == uncaptured.losses);
  CHECK(same_bits(captured.variables, uncaptured.variables));
}

TEST_CASE("GPU: a synchronising call while a run is captured is an error naming the call and the program", "[gpu]") {
  tj::test::ScopedEnv knob("TOWERJIT_CUDA_GRAPHS", "on");
  REQUIRE(tj::cuda::graphs_enabled());  // the driver and the emulator both have them
  DropoutMlp m;
  tj::CudaProgram step(m.graph, {m.loss}, /*run_update_ops=*/true, tj::gpu(0), "graph_breaker");
  tj::DeviceVariables vars = tj::to_device(initial(m.graph), step.device(), step.stream());
  step.during_capture = [&] { step.stream().synchronize(); };
  CHECK_THROWS_WITH(step.run(batch_feeds(5, 1), vars, 0),
                    Catch::Contains("capturing program \"" + step.name() + "\" on gpu:0 as a CUDA graph failed") &&
                        Catch::Contains("cuStreamSynchronize") &&
                        Catch::Contains("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"));
  // The program runs on once the call is gone: the broken capture left nothing behind.
  step.during_capture = nullptr;
  const float loss = step.run(batch_feeds(5, 1), vars, 0)[0].f32[0];
  CHECK(std::isfinite(loss));
  CHECK(step.graph_counts().captures == 1);
  CHECK(step.graph_counts().replays == 1);
}

// fit() of the dropout classifier on gpu:0, the variables on the GPU (a step runs the tower's
// program and the apply), over 20 examples in batches of 8 (8, 8 and a last batch of 4): up to
// `first_epochs`, then on to `more_epochs`, each batch copied at its step or prefetched. The
// graph counts before, after the first fit() and after the second.
std::vector<tj::CudaProgram::GraphCounts> fit_graph_counts(bool prefetch, int64_t first_epochs, int64_t more_epochs) {
  tj::test::ScopedEnv resident("TOWERJIT_GPU_VARIABLES", "on"), knob("TOWERJIT_CUDA_GRAPHS", "on"),
      feeds("TOWERJIT_PREFETCH_FEEDS", prefetch ? "on" : "off");
  const int64_t n = 20;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  tj::HostTensor image(tj::Shape{n, 784}), label(tj::Shape{n}, tj::DType::i32);
  for (float& v : image.f32) v = pixel(rng);
  for (int64_t i = 0; i < n; ++i) label.i32[i] = static_cast<int32_t>(i % 10);
  const tj::data::TensorDataset data({{"image", image}, {"label", label}}, "label");
  DropoutClassifier m;
  tj::TowerTrainer trainer(m.graph, m.loss, tj::Towers{tj::gpu(0)}, tj::momentum(0.05, 0.9));
  tj::data::BatchPipeline batches(data, {.batch = 8, .shuffle = false});
  std::vector<tj::CudaProgram::GraphCounts> counts{tj::CudaProgram::total_graph_counts()};
  tj::fit(trainer, batches, {.epochs = first_epochs, .stop_on_signals = false});
  counts.push_back(tj::CudaProgram::total_graph_counts());
  tj::fit(trainer, batches, {.epochs = more_epochs, .stop_on_signals = false});
  counts.push_back(tj::CudaProgram::total_graph_counts());
  return counts;
}

TEST_CASE("GPU: fit() captures each program in the first epoch and only replays after", "[gpu]") {
  // Each batch copied at its own step: its feeds at one address. Three epochs.
  const auto counts = fit_graph_counts(false, 1, 3);
  const auto &before = counts[0], &first = counts[1], &after = counts[2];
  // First epoch: the tower's program captured for 8 and for 4; the apply (no batch) once for
  // the gradients at the addresses the full batch leaves them, once more if the last batch's
  // buffer plan puts them elsewhere. Each of the 3 steps replays both programs.
  const int64_t first_captures = first.captures - before.captures;
  CHECK(first_captures >= 3);
  CHECK(first_captures <= 4);
  CHECK(first.replays - before.replays == 2 * 3);
  CHECK(first.uncaptured == before.uncaptured);
  // Two more epochs: nothing captured, every run replayed.
  CHECK(after.captures == first.captures);
  CHECK(after.replays - first.replays == 2 * 6);
  CHECK(after.uncaptured == before.uncaptured);
}

TEST_CASE("GPU: fit() prefetching batches captures once per slot and batch size, then only replays", "[gpu]") {
  // Each batch prefetched (runtime/towers/feed_prefetch.h) into one of two slots in turn: the
  // tower's program is fed from two addresses. With 3 batches an epoch the slots swap from one
  // epoch to the next, so the first two epochs capture the tower's program for each slot at 8
  // and at 4 (4 graphs) and the apply once or twice; after that, only replays.
  const auto counts = fit_graph_counts(true, 2, 4);
  const auto &before = counts[0], &first = counts[1], &after = counts[2];
  const int64_t first_captures = first.captures - before.captures;
  CHECK(first_captures >= 5);
  CHECK(first_captures <= 6);
  CHECK(first.replays - before.replays == 2 * 6);
  CHECK(first.uncaptured == before.uncaptured);
  CHECK(after.captures == first.captures);
  CHECK(after.replays - first.replays == 2 * 6);
  CHECK(after.uncaptured == before.uncaptured);
}
