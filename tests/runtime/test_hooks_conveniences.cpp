// LogHook's plain lines without a terminal, and CheckpointHook's best checkpoint by an
// evaluation metric.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <random>
#include <unistd.h>

#include "towerjit.h"

namespace tj = towerjit;
using Catch::Matchers::Contains;
using tj::kBatch;

namespace {

// Two noisy classes in "x" [n, 4], label "y".
tj::data::TensorDataset two_classes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0, 1.0f);
  tj::HostTensor x({n, 4}), y({n}, tj::DType::i32);
  for (int64_t i = 0; i < n; ++i) {
    y.i32[i] = static_cast<int32_t>(rng() % 2);
    for (int k = 0; k < 4; ++k) x.f32[i * 4 + k] = (y.i32[i] ? 0.5f : -0.5f) + noise(rng);
  }
  return tj::data::TensorDataset({{"x", x}, {"y", y}}, "y");
}

struct Model {
  tj::Graph graph;
  tj::Tensor logits;
  std::unique_ptr<tj::TowerTrainer> trainer;
  Model() {
    tj::GraphScope use(graph);
    logits = tj::dense(tj::relu(tj::dense(tj::input("x", {kBatch, 4}), 8, "fc1")), 2, "fc2");
    auto loss = tj::mean(tj::softmax_cross_entropy(logits, tj::input("y", {kBatch}, tj::DType::i32)));
    trainer = std::make_unique<tj::TowerTrainer>(graph, loss, tj::Towers{tj::cpu(0)}, tj::adam(0.02),
                                                 tj::TowerTrainerOptions{.logits = logits});
  }
};

// What `f` (a tmpfile) holds.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text += static_cast<char>(c);
  return text;
}

}  // namespace

TEST_CASE("without a terminal LogHook prints a plain line every log_every steps", "[hooks][report]") {
  const auto data = two_classes(40, 1);
  Model m;
  tj::data::BatchPipeline batches(data, {.batch = 8, .seed = 1});
  std::FILE* out = std::tmpfile();
  {
    tj::report::Progress progress(10, out, /*interactive=*/false);
    tj::LogHook log(progress, nullptr, /*every=*/2);
    tj::fit(*m.trainer, batches, {.epochs = 2, .hooks = {&log}});
  }
  const std::string text = contents(out);
  std::fclose(out);
  INFO(text);
  std::vector<int> steps;
  for (size_t at = 0; (at = text.find("step ", at)) != std::string::npos; ++at) {
    if (at > 0 && text[at - 1] != '\n') continue;  // "epoch 1: 5 steps" is not one
    int step = 0, epoch = 0;
    double loss = 0, rate = 0, lr = 0;
    REQUIRE(std::sscanf(text.c_str() + at, "step %d, epoch %d: loss %lf, %lf samples/s, lr %lf", &step, &epoch,
                        &loss, &rate, &lr) == 5);
    steps.push_back(step);
    CHECK(epoch == (step <= 5 ? 1 : 2));
    CHECK(lr == 0.02);
  }
  CHECK(steps == std::vector<int>{2, 4, 6, 8, 10});
  CHECK_THAT(text, Contains("epoch 1: 5 steps, train loss"));
  CHECK(text.find('\r') == std::string::npos);  // no bar drawn

  // On a terminal the bar stands in for them.
  std::FILE* tty = std::tmpfile();
  {
    tj::data::BatchPipeline again(data, {.batch = 8, .seed = 1});
    tj::report::Progress progress(5, tty, /*interactive=*/true);
    tj::LogHook log(progress, nullptr, 2);
    tj::fit(*m.trainer, again, {.epochs = 1, .hooks = {&log}});
  }
  CHECK(contents(tty).find("step 2, epoch 1: loss") == std::string::npos);
  std::fclose(tty);
}

TEST_CASE("CheckpointHook keeps the best checkpoint by an evaluation metric", "[hooks][checkpoint]") {
  const auto dir = std::filesystem::temp_directory_path() / ("towerjit-best-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto train = two_classes(64, 2), test = two_classes(200, 3);
  for (const tj::BestBy metric : {tj::BestBy::test_accuracy, tj::BestBy::test_loss}) {
    const bool accuracy = metric == tj::BestBy::test_accuracy;
    Model m;
    tj::data::BatchPipeline batches(train, {.batch = 16, .seed = 4});
    std::FILE* out = std::tmpfile();
    tj::report::Progress progress(0, out, false);
    tj::EvalHook eval(test, progress, nullptr, false, /*every=*/2);
    tj::CheckpointHook save(dir.string(), {{"model", "mlp"}}, 0, /*keep=*/1);
    save.keep_best(eval, metric);
    struct Scores : tj::Hook {
      const tj::EvalHook* eval;
      bool accuracy;
      std::vector<std::pair<double, int64_t>> seen;  // value, step
      void after_step(tj::TowerTrainer&, const tj::StepEvent& e) override {
        if (eval->evaluated_at() == e.step) seen.emplace_back(accuracy ? eval->last().accuracy : eval->last().loss, e.step);
      }
    } scores;
    scores.eval = &eval, scores.accuracy = accuracy;
    tj::fit(*m.trainer, batches, {.epochs = 3, .hooks = {&eval, &scores, &save}});
    REQUIRE(scores.seen.size() == 6);  // every 2 of 12 steps
    auto best = scores.seen.front();
    for (const auto& s : scores.seen)
      if (accuracy ? s.first > best.first : s.first < best.first) best = s;
    const std::string path = (dir / "best.tjck").string();
    CHECK(save.best_path() == path);
    CHECK(save.best_value() == best.first);
    CHECK(save.best_step() == best.second);
    const tj::Checkpoint kept = tj::load_checkpoint(path);
    CHECK(kept.metadata.at("best_metric") == (accuracy ? "test_accuracy" : "test_loss"));
    CHECK(std::stod(kept.metadata.at("best_value")) == best.first);
    CHECK(kept.metadata.at("best_step") == std::to_string(best.second));
    CHECK(kept.metadata.at("best_weights") == "trained");
    CHECK(kept.metadata.at("model") == "mlp");
    // Its weights are those the evaluation scored.
    Model fresh;
    fresh.trainer->restore(kept.variables, kept.step);
    const auto again = fresh.trainer->evaluate(test.inputs(), test.labels());
    CHECK((accuracy ? again.accuracy : again.loss) == best.first);
    // The rotation (keep 1) never removes it.
    CHECK(tj::load_checkpoint(dir.string()).step == 12);
    CHECK(std::filesystem::exists(path));
    std::fclose(out);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("CheckpointHook's best checkpoint needs the EvalHook listed before it", "[hooks][checkpoint]") {
  const auto dir = std::filesystem::temp_directory_path() / ("towerjit-best-order-" + std::to_string(::getpid()));
  const auto data = two_classes(32, 5);
  Model m;
  tj::data::BatchPipeline batches(data, {.batch = 16});
  tj::report::Progress progress(0, stdout, false);
  tj::EvalHook eval(data, progress, nullptr);
  const int line = __LINE__ + 1;
  tj::CheckpointHook save(dir.string(), {});
  save.keep_best(eval, tj::BestBy::test_loss);
  CHECK_THROWS_WITH(tj::fit(*m.trainer, batches, {.epochs = 1, .hooks = {&save, &eval}}),
                    Contains("runs before that EvalHook; list the EvalHook before the CheckpointHook") &&
                        Contains("test_hooks_conveniences.cpp:" + std::to_string(line)));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a resumed run competes with the best checkpoint its earlier part kept", "[hooks][checkpoint]") {
  const auto dir = std::filesystem::temp_directory_path() / ("towerjit-best-resume-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto train = two_classes(64, 6), test = two_classes(100, 7);
  std::FILE* out = std::tmpfile();
  tj::report::Progress progress(0, out, false);
  Model first;
  tj::EvalHook eval(test, progress, nullptr, false, 2);
  tj::CheckpointHook save(dir.string(), {});
  save.keep_best(eval, tj::BestBy::test_loss);
  tj::data::BatchPipeline batches(train, {.batch = 16});
  const tj::StepEvent last = tj::fit(*first.trainer, batches, {.epochs = 1, .max_steps = 4, .hooks = {&eval, &save}});
  REQUIRE(save.best_step() > 0);
  // A hook of a run resumed at step 4 starts from the kept value; one of a fresh run does not.
  tj::EvalHook eval2(test, progress, nullptr, false, 2);
  // (One hook at a time: each holds the directory's lock from begin() until it is destroyed.)
  {
    tj::CheckpointHook resumed(dir.string(), {});
    resumed.keep_best(eval2, tj::BestBy::test_loss);
    resumed.begin(*first.trainer, last.next);
    CHECK(resumed.best_value() == save.best_value());
    CHECK(resumed.best_step() == save.best_step());
  }
  {
    tj::CheckpointHook fresh(dir.string(), {});
    fresh.keep_best(eval2, tj::BestBy::test_loss);
    fresh.begin(*first.trainer, {});
    CHECK(fresh.best_step() == -1);
  }
  // Kept by another metric: the resumed run starts over.
  tj::CheckpointHook by_accuracy(dir.string(), {});
  by_accuracy.keep_best(eval2, tj::BestBy::test_accuracy);
  by_accuracy.begin(*first.trainer, last.next);
  CHECK(by_accuracy.best_step() == -1);
  std::fclose(out);
  std::filesystem::remove_all(dir);
}
