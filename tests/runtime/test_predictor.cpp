// Loading a checkpoint into an inference program in one call (runtime/towers/predictor.h).
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <random>
#include <unistd.h>

#include "towerjit.h"

// Where each mistake below is reported: the line of this file that made it (checked as the
// file, the line being the call's).
static const std::string here = "tests/runtime/test_predictor.cpp:";

namespace tj = towerjit;
using Catch::Matchers::Contains;
using tj::kBatch;

namespace {

// The model: conv + batch norm + dropout + dense, so inference differs from training.
tj::Tensor model(tj::Tensor image, int64_t hidden = 8) {
  auto x = tj::reshape(image, {kBatch, 1, 6, 6});
  auto h = tj::relu(tj::batch_norm(tj::conv2d(x, 4, 3, "conv", {.pad = 1}), "bn"));
  h = tj::dropout(tj::reshape(h, {kBatch, 4 * 6 * 6}), 0.3);
  return tj::dense(tj::relu(tj::dense(h, hidden, "fc1")), 3, "fc2");
}

tj::HostFeeds random_batch(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  tj::HostTensor image({n, 36}), label({n}, tj::DType::i32);
  for (float& v : image.f32) v = u(rng);
  for (int32_t& l : label.i32) l = static_cast<int32_t>(rng() % 3);
  return {{"image", image}, {"label", label}};
}

bool bitwise_equal(const tj::HostTensor& a, const tj::HostTensor& b) {
  return a.shape == b.shape && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace

TEST_CASE("a predictor loaded from a checkpoint predicts bitwise what the trainer predicts", "[predictor][towers]") {
  const auto dir = std::filesystem::temp_directory_path() / ("towerjit-predictor-" + std::to_string(::getpid()));
  tj::HostTensor trained, trained_ema;
  const tj::HostFeeds test = random_batch(50, 99);
  const tj::HostFeeds images = {{"image", test.at("image")}};
  std::string path;
  {
    tj::Graph graph;
    tj::GraphScope use(graph);
    auto logits = model(tj::input("image", {kBatch, 36}));
    auto loss = tj::mean(tj::softmax_cross_entropy(logits, tj::input("label", {kBatch}, tj::DType::i32)));
    tj::TowerTrainer trainer(graph, loss, tj::Towers{tj::cpu(0)}, tj::adam(0.01),
                             {.ema = tj::ExponentialMovingAverage{.decay = 0.9}, .logits = logits});
    for (int s = 0; s < 5; ++s) trainer.step(random_batch(32, s));
    trained = trainer.predict(images);
    trained_ema = trainer.predict(images, /*ema_weights=*/true);
    path = tj::save_checkpoint(dir.string(), {.step = trainer.applies(), .variables = trainer.variables()});
  }
  // A fresh graph with only the model: no loss, no optimiser, no EMA.
  tj::Graph graph;
  tj::GraphScope use(graph);
  auto logits = model(tj::input("image", {kBatch, 36}));
  tj::Predictor predictor(graph, logits, path);
  CHECK(predictor.needed().count("fc1/kernel") == 1);
  CHECK(predictor.needed().count("fc1/kernel/ema") == 0);
  CHECK(bitwise_equal(predictor.predict(images), trained));
  tj::Predictor with_ema(graph, logits, dir.string(), {.ema_weights = true});  // a directory: its newest
  CHECK(bitwise_equal(with_ema.predict(images), trained_ema));
  const tj::HostVariables loaded = tj::load_variables(path, predictor.needed(), /*ema_weights=*/true);
  CHECK(loaded.size() == predictor.needed().size());
  CHECK(bitwise_equal(loaded.at("fc1/kernel"), with_ema.values().at("fc1/kernel")));
  CHECK_FALSE(bitwise_equal(trained, trained_ema));

  // A model of other sizes, or of other names, is named with the variable and the file.
  tj::Graph other;
  tj::GraphScope use_other(other);
  auto wider = model(tj::input("image", {kBatch, 36}), 16);
  CHECK_THROWS_WITH(tj::Predictor(other, wider, path), (Contains("variable \"fc1/bias\" is f32[8] in checkpoint \"" + path) &&
                        Contains("as f32[16]")) && Catch::Contains(here));
  tj::Graph renamed;
  tj::GraphScope use_renamed(renamed);
  tj::Tensor x = tj::input("image", {kBatch, 36});
  auto head = tj::dense(x, 3, "head");
  const int line = __LINE__ + 1;
  CHECK_THROWS_WITH(tj::Predictor(renamed, head, path),
                    Contains("checkpoint \"" + path + "\" has no variable \"head/bias\"") &&
                        Contains("test_predictor.cpp:" + std::to_string(line)));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a predictor names a checkpoint without moving averages and an empty load", "[predictor][towers]") {
  const auto dir = std::filesystem::temp_directory_path() / ("towerjit-predictor-noema-" + std::to_string(::getpid()));
  tj::Graph graph;
  tj::GraphScope use(graph);
  auto logits = tj::dense(tj::input("x", {kBatch, 2}), 2, "out");
  tj::Predictor predictor(graph, logits);
  tj::HostTensor x({1, 2});
  CHECK_THROWS_WITH(predictor.predict({{"x", x}}), Contains("no variables loaded") && Catch::Contains(here));
  tj::HostVariables values = predictor.needed();
  const std::string path = tj::save_checkpoint(dir.string(), {.step = 1, .variables = values});
  CHECK_THROWS_WITH(tj::Predictor(graph, logits, path, {.ema_weights = true}), (Contains("holds no moving averages") && Contains(path)) && Catch::Contains(here));
  predictor.load(values);
  CHECK(predictor.predict({{"x", x}}).shape == tj::Shape{1, 2});
  values.erase("out/bias");
  CHECK_THROWS_WITH(predictor.load(values), Contains("no value for variable \"out/bias\"") &&
                                                Contains("; load a checkpoint (or the variables) of the model") &&
                                                Catch::Contains(here));
  std::filesystem::remove_all(dir);
}
