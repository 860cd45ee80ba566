// The trainer beyond step(): sync variants, predict / evaluate (with EMA weights), the learning
// rate it reports, restore, and fit() with hooks, a NaN stop and a bitwise resume through a
// checkpoint file.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <unistd.h>

#include "runtime/cpu/cpu_program.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;

namespace {

struct Model {
  std::unique_ptr<tj::Graph> graph = std::make_unique<tj::Graph>();
  tj::Tensor logits, loss;
  std::unique_ptr<tj::TowerTrainer> trainer;
};

// An MLP on "image" [B, 784] and "label" [B], as the input pipeline feeds them.
Model make_model(tj::Towers towers, const tj::Optimizer& opt, std::optional<tj::ExponentialMovingAverage> ema = {}) {
  Model m;
  tj::GraphScope use(*m.graph);
  auto image = tj::input("image", {kBatch, 784});
  auto label = tj::input("label", {kBatch}, tj::DType::i32);
  m.logits = tj::dense(tj::relu(tj::dense(image, 8, "fc1")), 10, "fc2");
  m.loss = tj::mean(tj::softmax_cross_entropy(m.logits, label));
  m.trainer = std::make_unique<tj::TowerTrainer>(*m.graph, m.loss, std::move(towers), opt,
                                                 tj::TowerTrainerOptions{.ema = ema, .logits = m.logits});
  return m;
}

tj::data::Dataset random_dataset(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  tj::data::Dataset d{tj::HostTensor({n, 784}), tj::HostTensor({n}, tj::DType::i32)};
  for (float& v : d.images.f32) v = u(rng);
  for (int32_t& l : d.labels.i32) l = static_cast<int32_t>(rng() % 10);
  return d;
}

tj::HostFeeds feeds_of(const tj::data::Dataset& d) { return {{"image", d.images}, {"label", d.labels}}; }

bool bitwise_equal(const tj::HostVariables& a, const tj::HostVariables& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    const auto& u = b.at(name);
    if (t.shape != u.shape || std::memcmp(t.data(), u.data(), t.size() * 4) != 0) return false;
  }
  return true;
}

tj::Towers cpu_towers(int n) {
  std::vector<tj::Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(tj::cpu(i));
  return tj::Towers(devices);
}

// Records what fit() tells its hooks.
struct Recorder : tj::Hook {
  std::vector<tj::StepEvent> steps;
  std::vector<int64_t> epochs_ended;
  int begins = 0, ends = 0;
  bool uses_trainer = true;  // false: free-running async towers need not stop for it
  bool uses_trainer_at(const tj::StepEvent&) const override { return uses_trainer; }
  void begin(tj::TowerTrainer&, const tj::data::PipelinePosition&) override { ++begins; }
  void after_step(tj::TowerTrainer&, const tj::StepEvent& e) override { steps.push_back(e); }
  void after_epoch(tj::TowerTrainer&, const tj::StepEvent& e) override { epochs_ended.push_back(e.epoch); }
  void end(tj::TowerTrainer&, const tj::StepEvent&) override { ++ends; }
};

}  // namespace

TEST_CASE("replicated and parameter-server sync towers compute bitwise the same variables", "[towers][runtime]") {
  const auto data = random_dataset(64, 3);
  for (const auto& opt : {tj::momentum(0.05, 0.9), tj::adam(0.01)}) {
    Model replicated = make_model(cpu_towers(3).variant(tj::SyncVariant::replicated), opt);
    Model server = make_model(cpu_towers(3).variant(tj::SyncVariant::parameter_server), opt);
    tj::data::BatchPipeline a(data, {.batch = 15, .seed = 9}), b(data, {.batch = 15, .seed = 9});
    for (int s = 0; s < 10; ++s) {
      replicated.trainer->step(a.next().feeds);
      server.trainer->step(b.next().feeds);
    }
    CHECK(bitwise_equal(replicated.trainer->variables(), server.trainer->variables()));
  }
}

TEST_CASE("predict concatenates the towers' logits in example order", "[towers][runtime]") {
  const auto data = random_dataset(127, 4);
  Model one = make_model(cpu_towers(1), tj::sgd(0.1));
  Model three = make_model(cpu_towers(3).split(tj::Split::balanced), tj::sgd(0.1));
  const tj::HostTensor a = one.trainer->predict({{"image", data.images}});
  const tj::HostTensor b = three.trainer->predict({{"image", data.images}});
  REQUIRE(a.shape == tj::Shape{127, 10});
  REQUIRE(b.shape == a.shape);
  for (int64_t k = 0; k < a.size(); ++k) REQUIRE(b.f32[k] == Approx(a.f32[k]).epsilon(1e-5).margin(1e-6));
}

TEST_CASE("evaluate reports the accuracy and mean cross-entropy the graph computes", "[towers][runtime]") {
  const auto data = random_dataset(127, 5);
  Model m = make_model(cpu_towers(2), tj::sgd(0.5));
  for (int s = 0; s < 5; ++s) m.trainer->step(feeds_of(data));
  // The oracle: the model's own loss and a correct count, compiled on the whole set at once.
  tj::GraphScope use(*m.graph);
  auto label = tj::Tensor(m.graph.get(), *m.graph->find_input("label"));
  auto correct = tj::sum(tj::cast(tj::equal(tj::argmax(m.logits, 1), label), tj::DType::f32));
  tj::CpuProgram oracle(*m.graph, {m.loss, correct});
  const auto expected = oracle.run(feeds_of(data), m.trainer->variables());
  for (int64_t chunk : {7, 2000}) {
    const auto result = m.trainer->evaluate({{"image", data.images}}, data.labels, false, chunk);
    CHECK(result.examples == 127);
    CHECK(result.accuracy == Approx(expected[1].f32[0] / 127.0).epsilon(1e-12));
    CHECK(result.loss == Approx(expected[0].f32[0]).epsilon(1e-5));
  }
}

TEST_CASE("evaluate with EMA weights uses the shadows, and the trained weights stay", "[towers][runtime]") {
  const auto data = random_dataset(64, 6);
  Model m = make_model(cpu_towers(2), tj::sgd(0.5), tj::ExponentialMovingAverage{.decay = 0.5, .num_updates = false});
  for (int s = 0; s < 4; ++s) m.trainer->step(feeds_of(data));
  const tj::HostVariables trained = m.trainer->variables();
  CHECK(trained.at("fc1/kernel").f32 != trained.at("fc1/kernel/ema").f32);
  tj::HostVariables shadows = trained;
  for (const char* v : {"fc1/kernel", "fc1/bias", "fc2/kernel", "fc2/bias"})
    shadows.at(v) = trained.at(std::string(v) + "/ema");
  tj::CpuProgram logits(*m.graph, {m.logits});
  const auto expected = logits.run({{"image", data.images}}, shadows)[0];
  const auto got = m.trainer->predict({{"image", data.images}}, true);
  for (int64_t k = 0; k < got.size(); ++k) REQUIRE(got.f32[k] == Approx(expected.f32[k]).epsilon(1e-5).margin(1e-6));
  CHECK(bitwise_equal(m.trainer->variables(), trained));

  Model plain = make_model(cpu_towers(1), tj::sgd(0.5));
  CHECK_THROWS_WITH(plain.trainer->predict({{"image", data.images}}, true),
                    Catch::Contains("keeps no moving averages") && Catch::Contains("TowerTrainerOptions{.ema"));
}

TEST_CASE("a step reports the learning rate its apply used", "[towers][runtime]") {
  const auto data = random_dataset(16, 7);
  Model m = make_model(cpu_towers(2), tj::sgd(tj::exponential_decay(0.1, 1, 0.5, true)));
  for (int s = 0; s < 4; ++s)
    CHECK(m.trainer->step(feeds_of(data)).learning_rate == Approx(0.1 * std::pow(0.5, s)).epsilon(1e-6));
}

TEST_CASE("restore names a missing, reshaped or unknown variable", "[towers][runtime]") {
  Model m = make_model(cpu_towers(1), tj::momentum(0.1, 0.9));
  tj::HostVariables values = m.trainer->variables();
  values.erase("fc2/bias");
  const std::string fix = "; restore takes every variable of the model (variables(), or a checkpoint of this model)";
  const std::string here = "tests/runtime/test_trainer_fit.cpp:";
  CHECK_THROWS_WITH(m.trainer->restore(values, 0),
                    Catch::Contains("no value for variable \"fc2/bias\"") && Catch::Contains(fix) && Catch::Contains(here));
  values = m.trainer->variables();
  values.at("fc1/bias") = tj::HostTensor({9});
  CHECK_THROWS_WITH(m.trainer->restore(values, 0),
                    Catch::Contains("\"fc1/bias\" is f32[8] in the model but f32[9]") && Catch::Contains(fix) &&
                        Catch::Contains(here));
  values = m.trainer->variables();
  values["fc3/kernel"] = tj::HostTensor({1});
  CHECK_THROWS_WITH(m.trainer->restore(values, 0),
                    Catch::Contains("\"fc3/kernel\" is not a variable") && Catch::Contains(fix) && Catch::Contains(here));
}

TEST_CASE("fit runs whole epochs, calls the hooks in order and stops at max_steps", "[towers][runtime]") {
  const auto data = random_dataset(50, 8);
  Model m = make_model(cpu_towers(2), tj::sgd(0.1));
  tj::data::BatchPipeline pipeline(data, {.batch = 16, .min_batch = 2});  // 16, 16, 16, 2
  Recorder r;
  const auto last = tj::fit(*m.trainer, pipeline, {.epochs = 2, .hooks = {&r}});
  CHECK(r.begins == 1);
  CHECK(r.ends == 1);
  REQUIRE(r.steps.size() == 8);
  CHECK(r.epochs_ended == std::vector<int64_t>{0, 1});
  CHECK(r.steps[3].examples == 2);
  CHECK(r.steps[4].epoch == 1);
  CHECK(last.step == 8);
  CHECK(last.next == tj::data::PipelinePosition{2, 0});
  CHECK(m.trainer->applies() == 8);

  Recorder early;
  tj::fit(*m.trainer, pipeline, {.epochs = 5, .max_steps = 10, .hooks = {&early}});
  CHECK(early.steps.size() == 2);  // the pipeline stood at step 8
  CHECK_THROWS_WITH(tj::fit(*m.trainer, pipeline, {.epochs = 0}), Catch::Contains("epochs 0 must be at least 1"));
}

TEST_CASE("fit with max_steps alone trains that many steps, and says when epochs would cut it short", "[towers][runtime]") {
  const auto data = random_dataset(50, 8);
  Model m = make_model(cpu_towers(2), tj::sgd(0.1));
  tj::data::BatchPipeline pipeline(data, {.batch = 16, .min_batch = 2});  // 4 batches an epoch
  Recorder r;
  const auto last = tj::fit(*m.trainer, pipeline, {.max_steps = 11, .hooks = {&r}});  // into the third epoch
  CHECK(r.steps.size() == 11);
  CHECK(last.step == 11);
  CHECK(r.epochs_ended == std::vector<int64_t>{0, 1});
  // Nothing given: one epoch.
  tj::data::BatchPipeline again(data, {.batch = 16, .min_batch = 2});
  CHECK(tj::fit(*m.trainer, again, {}).step == 4);
  // Both given, with max_steps out of the epochs' reach: the error says which to change.
  const int line = __LINE__ + 1;
  CHECK_THROWS_WITH(tj::fit(*m.trainer, again, {.epochs = 1, .max_steps = 100}),
                    Catch::Contains("fit: max_steps 100 is more than the 4 steps that epochs = 1 holds (4 batches an "
                                    "epoch), so training would stop at step 4; leave epochs unset to train 100 steps, or "
                                    "set epochs = 25") &&
                        Catch::Contains("test_trainer_fit.cpp:" + std::to_string(line)));
}

TEST_CASE("fit stops on a non-finite loss, naming the step, before any hook sees it", "[towers][runtime]") {
  const auto data = random_dataset(40, 9);
  Model m = make_model(cpu_towers(2), tj::sgd(1e30));  // the first update blows the weights up
  tj::data::BatchPipeline pipeline(data, {.batch = 10, .shuffle = false});
  Recorder r;
  // No hook keeps anything, and every input is finite: the training diverged.
  CHECK_THROWS_WITH(tj::fit(*m.trainer, pipeline, {.epochs = 1, .hooks = {&r}}),
                    Catch::Contains("the loss is NaN at step 2 (epoch 1, batch 2 of 4); training stopped") &&
                        Catch::Contains("no checkpoint is kept") &&
                        Catch::Contains("every input of the batch is finite, so the training diverged: lower the learning rate"));
  CHECK(r.steps.size() == 1);
  CHECK(r.ends == 0);
}

TEST_CASE("a non-finite loss caused by the data names the input and the example, not the learning rate", "[towers][runtime]") {
  auto data = random_dataset(40, 9);
  data.images.f32[13 * 784 + 5] = std::nanf("");  // example 13: batch 2, its example 3
  for (bool async : {false, true}) {
    Model m = make_model(async ? cpu_towers(2).reduce(tj::AsyncApply{}) : cpu_towers(2), tj::sgd(0.01));
    tj::data::BatchPipeline pipeline(data, {.batch = 10, .shuffle = false});
    INFO((async ? "async" : "sync") << " towers");
    // Free-running async towers may see the NaN apply of batch 2 in a slice of batch 1 first.
    CHECK_THROWS_WITH(tj::fit(*m.trainer, pipeline, {.epochs = 1}),
                      Catch::Contains(async ? "the loss is NaN at step" : "the loss is NaN at step 2") &&
                          Catch::Contains(async ? "\"image\" holds NaN at example 3 of the batch"
                                                : "the batch's input \"image\" holds NaN at example 3 of the batch") &&
                          Catch::Contains("the data is the cause, not the learning rate"));
  }
}

TEST_CASE("a run resumed from a checkpoint file continues bitwise like one never stopped", "[towers][runtime]") {
  const auto data = random_dataset(60, 10);
  const auto dir = std::filesystem::temp_directory_path() / ("towerjit-resume-" + std::to_string(::getpid()));
  const tj::data::PipelineOptions input{.batch = 16, .seed = 3, .min_batch = 2};
  const std::optional<tj::ExponentialMovingAverage> ema = tj::ExponentialMovingAverage{.decay = 0.9};
  const auto towers = cpu_towers(2).split(tj::Split::balanced);
  // Uninterrupted: 3 epochs.
  Model whole = make_model(towers, tj::adam(0.01), ema);
  tj::data::BatchPipeline p1(data, input);
  tj::fit(*whole.trainer, p1, {.epochs = 3});
  // Stopped after 6 steps (mid-epoch), saved, then a fresh process-like restart.
  {
    Model first = make_model(towers, tj::adam(0.01), ema);
    tj::data::BatchPipeline p2(data, input);
    const auto last = tj::fit(*first.trainer, p2, {.epochs = 3, .max_steps = 6});
    tj::save_checkpoint(dir.string(), {.step = first.trainer->applies(), .position = last.next,
                                       .variables = first.trainer->variables()});
  }
  const tj::Checkpoint saved = tj::load_checkpoint(dir.string());
  Model resumed = make_model(towers, tj::adam(0.01), ema);
  tj::check_matches(saved, resumed.trainer->variables());
  resumed.trainer->restore(saved.variables, saved.step);
  tj::data::BatchPipeline p3(data, input, saved.position);
  tj::fit(*resumed.trainer, p3, {.epochs = 3});
  CHECK(resumed.trainer->applies() == whole.trainer->applies());
  CHECK(bitwise_equal(resumed.trainer->variables(), whole.trainer->variables()));
  std::filesystem::remove_all(dir);
}

namespace {

// loss = mean over the batch of image . w: its gradient, the batch mean of the images, does
// not depend on w, so whatever order async towers apply in, w ends at the sum of the steps.
struct LinearModel {
  std::unique_ptr<tj::Graph> graph = std::make_unique<tj::Graph>();
  std::unique_ptr<tj::TowerTrainer> trainer;
};

LinearModel linear_model(tj::Towers towers, double lr) {
  LinearModel m;
  tj::GraphScope use(*m.graph);
  auto image = tj::input("image", {kBatch, 784});
  auto w = tj::variable("w", {784, 1}, {.init = tj::init::zeros()});
  m.trainer = std::make_unique<tj::TowerTrainer>(*m.graph, tj::mean(tj::matmul(image, w)), std::move(towers), tj::sgd(lr));
  return m;
}

// w after every batch of an unshuffled epoch: tower t applies -lr * (1/N) * its slice's mean.
std::vector<double> linear_model_weights(const tj::data::Dataset& d, const tj::Towers& towers, int64_t batch,
                                         double lr, int epochs) {
  std::vector<double> w(784, 0.0);
  const int64_t n = d.images.shape[0];
  for (int e = 0; e < epochs; ++e)
    for (int64_t first = 0; first < n; first += batch) {
      int64_t row = first;
      for (int64_t slice : towers.slices(std::min(batch, n - first))) {
        for (int j = 0; j < 784; ++j) {
          double mean = 0;
          for (int64_t r = row; r < row + slice; ++r) mean += d.images.f32[r * 784 + j];
          w[j] -= lr / towers.size() * mean / slice;
        }
        row += slice;
      }
    }
  return w;
}

// In its first after_step, waits (20 s at most) until the towers have applied `target` times:
// only towers that go on past a batch while its hooks run get there.
struct WaitForTowers : tj::Hook {
  int64_t target = 0;
  bool reached = false;
  void after_step(tj::TowerTrainer& trainer, const tj::StepEvent& e) override {
    if (e.step != 1) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (trainer.applies() < target && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    reached = trainer.applies() >= target;
  }
  bool uses_trainer_at(const tj::StepEvent&) const override { return false; }
};

// At every third step and each epoch's end the hook uses the trainer: it records the applies
// it sees there.
struct QuietProbe : tj::Hook {
  std::vector<std::pair<int64_t, int64_t>> seen;  // (step, applies)
  bool uses_trainer_at(const tj::StepEvent& e) const override {
    return e.step % 3 == 0 || e.batch_in_epoch + 1 == e.batches_per_epoch;
  }
  void after_step(tj::TowerTrainer& trainer, const tj::StepEvent& e) override {
    if (uses_trainer_at(e)) seen.emplace_back(e.step, trainer.applies());
  }
};

}  // namespace

TEST_CASE("fit runs several async towers free, and reports every batch once, in order", "[towers][runtime]") {
  const auto data = random_dataset(160, 11);
  const auto towers = cpu_towers(3).reduce(tj::AsyncApply{});
  LinearModel m = linear_model(towers, 0.1);
  tj::data::BatchPipeline pipeline(data, {.batch = 16, .shuffle = false});  // 10 batches: 5 + 5 + 6
  WaitForTowers wait;
  wait.target = 3 * 4;  // the towers' applies of four batches, while step 1's hooks run
  Recorder r;
  r.uses_trainer = false;
  const auto last = tj::fit(*m.trainer, pipeline, {.epochs = 2, .hooks = {&wait, &r}});
  CHECK(wait.reached);
  REQUIRE(r.steps.size() == 20);
  for (int64_t i = 0; i < 20; ++i) {
    CHECK(r.steps[i].step == i + 1);
    CHECK(r.steps[i].examples == 16);
    CHECK(std::isfinite(r.steps[i].loss));
  }
  CHECK(r.epochs_ended == std::vector<int64_t>{0, 1});
  CHECK(r.ends == 1);
  CHECK(last.next == tj::data::PipelinePosition{2, 0});
  // Every slice applied once, none lost.
  CHECK(m.trainer->applies() == 60);
  CHECK(m.trainer->async_report().applies == 60);
  const std::vector<double> expected = linear_model_weights(data, towers, 16, 0.1, 2);
  for (int j = 0; j < 784; ++j) CHECK(m.trainer->variables().at("w").f32[j] == Approx(expected[j]).epsilon(1e-4).margin(1e-6));
}

TEST_CASE("free-running towers stop where a hook uses the trainer, and keep the staleness bound", "[towers][runtime]") {
  const auto data = random_dataset(70, 12);
  for (std::optional<int64_t> bound : {std::optional<int64_t>(), std::optional<int64_t>(0), std::optional<int64_t>(1)}) {
    const auto towers = cpu_towers(3).reduce(tj::AsyncApply{.max_staleness = bound});
    LinearModel m = linear_model(towers, 0.05);
    tj::data::BatchPipeline pipeline(data, {.batch = 9, .shuffle = false});  // 8 batches, the last of 7
    QuietProbe probe;
    tj::fit(*m.trainer, pipeline, {.epochs = 2, .hooks = {&probe}});
    INFO("bound " << (bound ? std::to_string(*bound) : "none"));
    // Steps 3, 6, 8 (epoch end), 9, 12, 15, 16: exactly the applies of the batches before.
    REQUIRE(probe.seen.size() == 7);
    for (const auto& [step, applies] : probe.seen) CHECK(applies == 3 * step);
    const auto report = m.trainer->async_report();
    CHECK(report.applies == 48);
    if (bound) CHECK(report.max_lead <= *bound);
    const std::vector<double> expected = linear_model_weights(data, towers, 9, 0.05, 2);
    for (int j = 0; j < 784; ++j) CHECK(m.trainer->variables().at("w").f32[j] == Approx(expected[j]).epsilon(1e-4).margin(1e-6));
  }
}

TEST_CASE("free-running towers stop on a non-finite loss with no hook seeing it", "[towers][runtime]") {
  const auto data = random_dataset(40, 9);
  Model m = make_model(cpu_towers(2).reduce(tj::AsyncApply{}), tj::sgd(1e30));
  tj::data::BatchPipeline pipeline(data, {.batch = 10, .shuffle = false});
  Recorder r;
  r.uses_trainer = false;
  CHECK_THROWS_WITH(tj::fit(*m.trainer, pipeline, {.epochs = 1, .hooks = {&r}}),
                    Catch::Contains("the loss is") && Catch::Contains("training stopped"));
  for (const auto& e : r.steps) CHECK(std::isfinite(e.loss));
  CHECK(r.steps.size() < 4);
  CHECK(r.ends == 0);
}

TEST_CASE("step() raises on a non-finite loss, naming a non-finite input, unless asked not to", "[towers][runtime]") {
  auto data = random_dataset(10, 9);
  data.images.f32[4 * 784 + 100] = std::nanf("");  // relu keeps a NaN (an infinity may end in its zeros)
  Model m = make_model(cpu_towers(2), tj::sgd(0.01));
  tj::data::BatchPipeline pipeline(data, {.batch = 10, .shuffle = false});
  const tj::HostFeeds batch = pipeline.next().feeds;
  CHECK_THROWS_WITH(m.trainer->step(batch), Catch::Contains("step: the loss is NaN") &&
                                                Catch::Contains("the batch's input \"image\" holds NaN at example 4") &&
                                                Catch::Contains("test_trainer_fit.cpp"));
  CHECK(std::isnan(m.trainer->step(batch, {.check_loss = false}).loss));
}
