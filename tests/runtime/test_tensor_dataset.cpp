// Datasets of the user's own arrays under any names: their checks, batching and shuffling every
// array alike, and fit() with EvalHook on such a dataset.
#include <catch2/catch.hpp>
#include <cstdio>
#include <random>
#include <set>

#include "towerjit.h"

// Where each mistake below is reported: the line of this file that made it (checked as the
// file, the line being the call's).
static const std::string here = "tests/runtime/test_tensor_dataset.cpp:";

namespace tj = towerjit;
using Catch::Matchers::Contains;

namespace {

// "features" f32 [n, 3] with row i = (i, i + 0.5, -i), "weight" f32 [n] = 2i, "target" i32 [n]
// = i % 4: every row says which example it came from.
tj::HostFeeds numbered(int64_t n) {
  tj::HostTensor features({n, 3}), weight({n}), target({n}, tj::DType::i32);
  for (int64_t i = 0; i < n; ++i) {
    features.f32[i * 3] = static_cast<float>(i);
    features.f32[i * 3 + 1] = static_cast<float>(i) + 0.5f;
    features.f32[i * 3 + 2] = -static_cast<float>(i);
    weight.f32[i] = 2.0f * static_cast<float>(i);
    target.i32[i] = static_cast<int32_t>(i % 4);
  }
  return {{"features", features}, {"weight", weight}, {"target", target}};
}

}  // namespace

TEST_CASE("a dataset of named arrays checks that they agree on the example count", "[data][dataset]") {
  auto arrays = numbered(10);
  arrays["weight"] = tj::HostTensor({9});
  const int line = __LINE__ + 1;
  CHECK_THROWS_WITH(tj::data::TensorDataset(arrays, "target"),
                    Contains("arrays \"features\" and \"weight\" disagree on the number of examples") &&
                        Contains("\"features\" has 10") && Contains("\"weight\" has 9") &&
                        Contains("test_tensor_dataset.cpp:" + std::to_string(line)));
  CHECK_THROWS_WITH(tj::data::TensorDataset(numbered(10), "y"), (Contains("the label array \"y\" is not one of the dataset's arrays (\"features\", \"target\", "
                             "\"weight\")")) && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::data::TensorDataset(tj::HostFeeds{}), Contains("at least one array") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::data::TensorDataset({{"s", tj::HostTensor(tj::Shape{})}}), Contains("is a scalar") && Catch::Contains(here));
  tj::HostTensor short_of_values({4, 2});
  short_of_values.f32.resize(7);
  CHECK_THROWS_WITH(tj::data::TensorDataset({{"x", short_of_values}}), Contains("holds 7 values") && Catch::Contains(here));
  // Without a label array: fine until labels are asked for.
  const tj::data::TensorDataset unlabelled({{"x", tj::HostTensor({4, 2})}});
  CHECK_FALSE(unlabelled.has_labels());
  CHECK_THROWS_WITH(unlabelled.labels(), (Contains("no label array \"label\"") && Contains("TensorDataset(arrays,")) && Catch::Contains(here));
}

TEST_CASE("the pipeline batches and shuffles every array of a dataset alike", "[data][dataset]") {
  const tj::data::TensorDataset data(numbered(23), "target");
  CHECK(data.size() == 23);
  CHECK(data.inputs().count("target") == 0);
  tj::data::BatchPipeline batches(data, {.batch = 5, .seed = 4});
  CHECK(batches.batches_per_epoch() == 5);
  std::set<int> seen;
  for (int b = 0; b < 5; ++b) {
    const tj::data::Batch batch = batches.next();
    CHECK(batch.feeds.size() == 3);
    CHECK(batch.size() == (b < 4 ? 5 : 3));
    const auto& f = batch.feeds.at("features");
    CHECK(f.shape == tj::Shape{batch.size(), 3});
    for (int64_t r = 0; r < batch.size(); ++r) {
      const int i = static_cast<int>(f.f32[r * 3]);
      seen.insert(i);
      CHECK(f.f32[r * 3 + 1] == i + 0.5f);
      CHECK(f.f32[r * 3 + 2] == -i);
      CHECK(batch.feeds.at("weight").f32[r] == 2.0f * i);
      CHECK(batch.feeds.at("target").i32[r] == i % 4);
    }
  }
  CHECK(seen.size() == 23);  // one epoch visits every example once
  // The same order as the Fashion-MNIST pipeline's for the same seed and size.
  const auto order = tj::data::epoch_order(23, 4, 0);
  tj::data::BatchPipeline again(data, {.batch = 5, .seed = 4});
  CHECK(again.next().feeds.at("weight").f32[0] == 2.0f * order[0]);
}

TEST_CASE("a Fashion-MNIST Dataset is a dataset of \"image\" and \"label\"", "[data][dataset]") {
  tj::data::Dataset mnist{tj::HostTensor({6, 4}), tj::HostTensor({6}, tj::DType::i32)};
  for (int i = 0; i < 6; ++i) mnist.labels.i32[i] = i;
  const tj::data::TensorDataset data(mnist);
  CHECK(data.label_name() == "label");
  CHECK(data.labels().i32 == mnist.labels.i32);
  CHECK(data.array("image").shape == tj::Shape{6, 4});
  tj::data::BatchPipeline batches(mnist, {.batch = 4, .shuffle = false});
  const auto batch = batches.next();
  CHECK(batch.size() == 4);
  CHECK(batch.feeds.at("label").i32 == std::vector<int32_t>{0, 1, 2, 3});
}

TEST_CASE("fit and EvalHook train and evaluate on a dataset with feeds of any names", "[data][dataset][towers]") {
  // Two well-separated classes in "pixels" [n, 4]; the label array is "cls".
  const int64_t n = 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0, 0.3f);
  tj::HostTensor pixels({n, 4}), cls({n}, tj::DType::i32);
  for (int64_t i = 0; i < n; ++i) {
    cls.i32[i] = static_cast<int32_t>(i % 2);
    for (int k = 0; k < 4; ++k) pixels.f32[i * 4 + k] = (cls.i32[i] ? 1.0f : -1.0f) + noise(rng);
  }
  const tj::data::TensorDataset data({{"pixels", pixels}, {"cls", cls}}, "cls");
  tj::Graph graph;
  tj::GraphScope use(graph);
  auto logits = tj::dense(tj::input("pixels", {tj::kBatch, 4}), 2, "out");
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, tj::input("cls", {tj::kBatch}, tj::DType::i32)));
  tj::TowerTrainer trainer(graph, loss, tj::Towers{tj::cpu(0), tj::cpu(1)}, tj::adam(0.05), {.logits = logits});
  tj::data::BatchPipeline batches(data, {.batch = 16, .seed = 2});
  std::FILE* out = std::tmpfile();
  tj::report::Progress progress(0, out, false);
  tj::EvalHook eval(data, progress, nullptr);
  tj::fit(trainer, batches, {.epochs = 3, .hooks = {&eval}});
  CHECK(eval.evaluated_at() == 12);
  CHECK(eval.last().examples == n);
  CHECK(eval.last().accuracy > 0.95);
  const auto direct = trainer.evaluate(data.inputs(), data.labels());
  CHECK(direct.accuracy == eval.last().accuracy);
  CHECK(direct.loss == eval.last().loss);
  std::fclose(out);

  // Labels that are not class indices, and a dataset without labels, are named.
  const tj::data::TensorDataset float_labels({{"pixels", pixels}, {"cls", tj::HostTensor({n})}}, "cls");
  tj::report::Progress quiet(0, stdout, false);
  CHECK_THROWS_WITH(tj::EvalHook(float_labels, quiet, nullptr), (Contains("the label array \"cls\" is f32[64]") && Contains("i32 [N]")) && Catch::Contains(here));
  const tj::data::TensorDataset no_labels({{"pixels", pixels}});
  CHECK_THROWS_WITH(tj::EvalHook(no_labels, quiet, nullptr), Contains("no label array \"label\"") && Catch::Contains(here));
}
