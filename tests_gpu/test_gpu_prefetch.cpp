// fit() on sync GPU towers with each batch copied to the GPUs while the step before it trains
// (runtime/towers/feed_prefetch.h): the same bits as copying each batch at its own step, under
// the emulator's random schedules too (a run that read its feeds before their copy had landed
// would read the buffers' NaN fill or the batch before); the batch after a step whose hooks use
// the trainer read only after them; a stop and a second fit() losing no batch; a bad batch, or
// one whose transform threw, raising its error at its own turn, after the batches before it
// have trained; a stop signal while a step is queued behind another letting that step finish.
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "gpu_check.h"
#include "runtime/cuda/driver_api.h"
#include "runtime/towers/feed_prefetch.h"
#include "runtime/towers/gpu_resident_sync.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using tj::testing::ScopedEnv;

namespace {

// 784-32-10 with dropout (keyed by the step and tower) and batch norm (a model update the
// towers' slices are weighed in), mean cross-entropy.
struct Model {
  tj::Graph graph;
  Tensor loss;
  Model() {
    tj::GraphScope use(graph);
    auto image = tj::input("image", {kBatch, 784});
    auto label = tj::input("label", {kBatch}, tj::DType::i32);
    auto h = tj::batch_norm(tj::relu(tj::dense(image, 32, "fc1")), "bn");
    h = tj::dropout(h, 0.5, /*training=*/true, /*seed=*/11);
    loss = tj::mean(tj::softmax_cross_entropy(tj::dense(h, 10, "fc2"), label));
  }
};

tj::data::TensorDataset dataset(int64_t n) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  tj::HostTensor image(tj::Shape{n, 784}), label(tj::Shape{n}, tj::DType::i32);
  for (float& v : image.f32) v = pixel(rng);
  for (int64_t i = 0; i < n; ++i) label.i32[i] = static_cast<int32_t>((i * 7) % 10);
  return tj::data::TensorDataset({{"image", image}, {"label", label}}, "label");
}

// Records each step's loss; uses the trainer (reads its variables) at the steps in `quiet`.
struct Record : tj::Hook {
  std::vector<int64_t> quiet;
  std::vector<double> losses;
  std::vector<int64_t> steps;
  std::vector<float> probe;  // fc1's first weight, read at the quiet steps
  void after_step(tj::TowerTrainer& trainer, const tj::StepEvent& e) override {
    losses.push_back(e.loss);
    steps.push_back(e.step);
    if (uses_trainer_at(e)) probe.push_back(trainer.variables().at("fc1/kernel").f32[0]);
  }
  bool uses_trainer_at(const tj::StepEvent& e) const override {
    return std::find(quiet.begin(), quiet.end(), e.step) != quiet.end();
  }
};

bool same_bits(const tj::HostVariables& a, const tj::HostVariables& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a)
    if (!b.count(name) || t.bytes() != b.at(name).bytes() || std::memcmp(t.data(), b.at(name).data(), t.bytes()) != 0)
      return false;
  return true;
}

struct Run {
  Record record;
  tj::HostVariables variables;
  int64_t prefetched = 0;  // batches the prefetcher copied
  int64_t behind = 0;      // steps queued behind the one before
};

// Two towers (on two GPUs where there are two), uneven slices of batches of 7 from 20 examples
// (7, 7 and a last batch of 6), the variables on the GPUs; fit() for each of `max_steps` in turn
// (one fit() after another, the pipeline going on), the steps in `quiet` using the trainer.
void train_into(Run& r, bool prefetch, const std::vector<int64_t>& max_steps, const std::vector<int64_t>& quiet = {},
                std::function<void(tj::data::Batch&)> transform = nullptr) {
  ScopedEnv knob("TOWERJIT_PREFETCH_FEEDS", prefetch ? "on" : "off");
  const tj::data::TensorDataset data = dataset(20);
  Model m;
  const int second = tj::cuda::cuda_device_count() > 1 ? 1 : 0;
  tj::TowerTrainer trainer(m.graph, m.loss, tj::Towers{tj::gpu(0), tj::gpu(second)}, tj::momentum(0.05, 0.9),
                           {.seed = 3, .strategy = {.gpu_variables = true}});
  tj::data::BatchPipeline batches(data, {.batch = 7, .seed = 9, .transform = std::move(transform)});
  r.record.quiet = quiet;
  const int64_t before = tj::detail::FeedPrefetcher::batches_copied(),
                behind = tj::GpuResidentSync::steps_queued_behind();
  auto keep = [&] {  // also when fit() throws
    r.prefetched = tj::detail::FeedPrefetcher::batches_copied() - before;
    r.behind = tj::GpuResidentSync::steps_queued_behind() - behind;
    r.variables = trainer.variables();
  };
  try {
    for (int64_t steps : max_steps)
      tj::fit(trainer, batches, {.max_steps = steps, .hooks = {&r.record}, .stop_on_signals = false});
  } catch (...) {
    keep();
    throw;
  }
  keep();
}

Run train(bool prefetch, const std::vector<int64_t>& max_steps, const std::vector<int64_t>& quiet = {}) {
  Run r;
  train_into(r, prefetch, max_steps, quiet);
  return r;
}

}  // namespace

TEST_CASE("GPU: fit() copying each batch while the step before trains gives the bits of copying it at its step",
          "[gpu]") {
  const Run plain = train(false, {7});
  const Run prefetched = train(true, {7});
  CHECK(plain.prefetched == 0);
  CHECK(prefetched.prefetched == 7);
  // Every step but the first queued behind the one before (one GPU or NCCL between two).
  CHECK(plain.behind == 0);
  CHECK(prefetched.behind == 6);
  REQUIRE(plain.record.losses.size() == 7);
  CHECK(prefetched.record.steps == plain.record.steps);
  CHECK(prefetched.record.losses == plain.record.losses);
  CHECK(same_bits(prefetched.variables, plain.variables));
}

TEST_CASE("GPU: prefetched batches and steps queued behind keep their bits when the streams run in random orders",
          "[gpu]") {
  // Every step a quiet point: each batch is read, copied and trained at once, so a run that
  // did not wait for its batch's copy would race it at every step. No quiet point: every step
  // queued behind the one before, so towers that did not wait for the apply before would read
  // variables it had not written yet.
  const std::vector<int64_t> every_step = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  for (const bool quiet : {true, false}) {
    const Run plain = train(false, {12}, quiet ? every_step : std::vector<int64_t>{});
    for (int seed = 1; seed <= 3; ++seed) {
      INFO("TOWERJIT_EMULATOR_SCHEDULE=random:" << seed << (quiet ? ", every step a quiet point" : ""));
      ScopedEnv schedule("TOWERJIT_EMULATOR_SCHEDULE", ("random:" + std::to_string(seed)).c_str());
      const Run prefetched = train(true, {12}, quiet ? every_step : std::vector<int64_t>{});
      CHECK(prefetched.behind == (quiet ? 0 : 11));
      CHECK(prefetched.record.losses == plain.record.losses);
      CHECK(same_bits(prefetched.variables, plain.variables));
    }
  }
}

TEST_CASE("GPU: prefetching fit() reads no batch ahead of hooks that use the trainer, and a second fit() loses none",
          "[gpu]") {
  // Steps 1 and 4 are quiet points (the hook reads the variables); fit() stops at step 3, then
  // again at 7: every batch trains once, in order, as without prefetching.
  const Run plain = train(false, {3, 7}, {1, 4});
  const Run prefetched = train(true, {3, 7}, {1, 4});
  CHECK(plain.record.steps == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7});
  CHECK(prefetched.record.steps == plain.record.steps);
  CHECK(prefetched.record.losses == plain.record.losses);
  CHECK(prefetched.record.probe == plain.record.probe);
  CHECK(same_bits(prefetched.variables, plain.variables));
  CHECK(prefetched.prefetched == 7);
}

namespace {

// fit() to 3 steps with `transform` spoiling the third batch, each batch copied at its step and
// then prefetched: the message it stopped with and the steps that trained, both ways alike.
void check_third_batch_fails_at_its_turn(const std::function<void(tj::data::Batch&)>& transform,
                                         const std::string& expected) {
  for (bool prefetch : {false, true}) {
    INFO("prefetch " << prefetch);
    Run r;
    std::string message;
    try {
      train_into(r, prefetch, {3}, {}, transform);
    } catch (const tj::Error& e) {
      message = e.what();
    }
    CHECK_THAT(message, Catch::Contains(expected));
    CHECK(r.record.steps == std::vector<int64_t>{1, 2});
  }
}

}  // namespace

TEST_CASE("GPU: a batch read ahead with inputs that disagree raises its error at its own turn", "[gpu]") {
  // The transform cuts the labels of the third batch short: its split fails when it is read,
  // a step early, and the error comes after the two batches before it have trained.
  check_third_batch_fails_at_its_turn(
      [](tj::data::Batch& b) {
        if (b.index != 2) return;
        tj::HostTensor& label = b.feeds.at("label");
        label = tj::rows_of(label, 0, label.shape[0] - 1);
      },
      "step: input \"label\" has 5 examples but \"image\" has 6");
}

TEST_CASE("GPU: a batch read ahead whose transform throws raises the error at its own turn", "[gpu]") {
  check_third_batch_fails_at_its_turn(
      [](tj::data::Batch& b) {
        if (b.index == 2) throw tj::Error("the third batch's augmentation failed");
      },
      "the third batch's augmentation failed");
}

TEST_CASE("GPU: a NaN loss stops fit() with no later step queued behind it", "[gpu]") {
  // The fourth batch's first pixel is NaN: its loss is NaN, and fit() stops naming it, the
  // trainer holding exactly what the plain loop leaves (that step applied, no later one).
  auto poison_fourth = [](tj::data::Batch& b) {
    if (b.epoch == 1 && b.index == 0) b.feeds.at("image").f32[0] = std::numeric_limits<float>::quiet_NaN();
  };
  std::vector<Run> runs(2);
  for (bool prefetch : {false, true}) {
    INFO("prefetch " << prefetch);
    Run& r = runs[prefetch];
    std::string message;
    try {
      train_into(r, prefetch, {7}, {}, poison_fourth);
    } catch (const tj::Error& e) {
      message = e.what();
    }
    CHECK_THAT(message, Catch::Contains("the loss is NaN at step 4") && Catch::Contains("\"image\" holds NaN"));
    CHECK(r.record.steps == std::vector<int64_t>{1, 2, 3});
  }
  CHECK(runs[1].behind == 3);  // steps 2, 3 and 4 behind the one before; not 5 behind 4
  CHECK(runs[1].record.losses == runs[0].record.losses);
  CHECK(same_bits(runs[1].variables, runs[0].variables));
}

// Raises SIGTERM in the hooks of step `at`, which run while step `at` + 1 is queued behind it.
struct SignalAfter : tj::Hook {
  int64_t at = 0;
  std::vector<int64_t> steps;
  int ended_by = -1;
  void after_step(tj::TowerTrainer&, const tj::StepEvent& e) override {
    steps.push_back(e.step);
    if (e.step == at) ::raise(SIGTERM);  // to this thread: handled before raise returns
  }
  void end(tj::TowerTrainer&, const tj::StepEvent& last) override { ended_by = last.stopped_by; }
  bool uses_trainer_at(const tj::StepEvent&) const override { return false; }  // the next step may be queued
};

TEST_CASE("GPU: a stop signal while a step is queued behind another lets that step finish and queues none after it",
          "[gpu]") {
  // The signal comes in step 3's hooks, with step 4 already on the GPU: step 4 finishes and is
  // reported (its hooks run, the stop names it), no step 5 is queued, and the trainer holds what
  // the plain loop holds after 4 steps.
  const Run plain = train(false, {4});
  ScopedEnv knob("TOWERJIT_PREFETCH_FEEDS", "on");
  const tj::data::TensorDataset data = dataset(20);
  Model m;
  const int second = tj::cuda::cuda_device_count() > 1 ? 1 : 0;
  tj::TowerTrainer trainer(m.graph, m.loss, tj::Towers{tj::gpu(0), tj::gpu(second)}, tj::momentum(0.05, 0.9),
                           {.seed = 3, .strategy = {.gpu_variables = true}});
  tj::data::BatchPipeline batches(data, {.batch = 7, .seed = 9});
  SignalAfter probe;
  probe.at = 3;
  const int64_t behind = tj::GpuResidentSync::steps_queued_behind();
  try {
    tj::fit(trainer, batches, {.epochs = 5, .hooks = {&probe}});
    FAIL("fit returned");
  } catch (const tj::Interrupted& stop) {
    CHECK(stop.signal() == SIGTERM);
    CHECK(stop.step() == 4);
  }
  CHECK(probe.steps == std::vector<int64_t>{1, 2, 3, 4});
  CHECK(probe.ended_by == SIGTERM);
  CHECK(tj::GpuResidentSync::steps_queued_behind() - behind == 3);  // steps 2, 3 and 4
  CHECK(same_bits(trainer.variables(), plain.variables));
}
