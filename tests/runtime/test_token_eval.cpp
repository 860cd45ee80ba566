// Per-token evaluation of a language model (evaluate_tokens, TokenEvalHook) against a closed
// form: logits whose softmax is known exactly, and errors that name the user's line also when
// the hook is made through std::make_unique.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <memory>

#include "runtime/towers/token_eval_hook.h"
#include "towerjit.h"

namespace tj = towerjit;
using Catch::Matchers::Contains;

namespace {

const std::string here = "tests/runtime/test_token_eval.cpp:";
constexpr int64_t kT = 5, kV = 4;

// logits[n,t,c] = log(1 + (c + n + t) % 4): every row's softmax is {1, 2, 3, 4} / 10 in some
// order, so the probability of each label, and the argmax, are known exactly.
int32_t label_of(int64_t n, int64_t t) { return static_cast<int32_t>((n * 7 + t * 3) % kV); }
int64_t rank_of(int64_t c, int64_t n, int64_t t) { return (c + n + t) % kV; }  // 3: the largest

tj::HostFeeds known_logits(int64_t n, int64_t tokens = kT) {
  tj::HostTensor x({n, kT, kV}), targets({n, tokens}, tj::DType::i32);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < kT; ++t)
      for (int64_t c = 0; c < kV; ++c) x.f32[(i * kT + t) * kV + c] = std::log(1.0f + static_cast<float>(rank_of(c, i, t)));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < tokens; ++t) targets.i32[i * tokens + t] = label_of(i, t);
  return {{"x", x}, {"targets", targets}};
}

// The closed form: mean of -log p(label), p = (1 + rank) / 10; accuracy: labels of rank 3.
std::pair<double, double> expected(int64_t n) {
  double loss = 0, correct = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < kT; ++t) {
      const int64_t r = rank_of(label_of(i, t), i, t);
      loss -= std::log((1.0 + r) / 10.0);
      correct += r == 3;
    }
  return {loss / (n * kT), correct / (n * kT)};
}

// logits = x + b, b a trainable [V] of zeros: the logits are x exactly.
struct Model {
  tj::Graph graph;
  std::unique_ptr<tj::TowerTrainer> trainer;
  explicit Model(int towers) {
    tj::GraphScope use(graph);
    auto logits = tj::add(tj::input("x", {tj::kBatch, kT, kV}), tj::variable("b", {kV}, {.init = tj::init::zeros()}));
    auto loss = tj::mean(tj::softmax_cross_entropy(logits, tj::input("targets", {tj::kBatch, kT}, tj::DType::i32)));
    tj::Towers t = towers == 1 ? tj::Towers{tj::cpu(0)} : tj::Towers{tj::cpu(0), tj::cpu(1)};
    trainer = std::make_unique<tj::TowerTrainer>(graph, loss, t, tj::sgd(0.0), tj::TowerTrainerOptions{.logits = logits});
  }
};

}  // namespace

TEST_CASE("evaluate_tokens gives the closed form of loss and perplexity and token accuracy", "[towers][eval]") {
  for (int64_t n : {1, 7}) {
    for (int towers : {1, 2}) {
      for (int64_t chunk : {1, 3, 256}) {
        Model m(towers);
        const tj::HostFeeds data = known_logits(n);
        const auto r = tj::evaluate_tokens(*m.trainer, {{"x", data.at("x")}}, data.at("targets"), {.chunk = chunk});
        const auto [loss, accuracy] = expected(n);
        INFO(n << " examples, " << towers << " towers, chunk " << chunk);
        // Each f32 logit is log(k) rounded (relative error 2^-24, |log k| < 1.4): a token's
        // loss moves by under 2 * 1.4 * 6e-8; the sums are in double.
        CHECK(r.loss == Approx(loss).margin(1e-6));
        CHECK(r.perplexity == Approx(std::exp(loss)).epsilon(1e-6));
        CHECK(r.accuracy == accuracy);  // the argmax is exact: the ranks differ by log(4/3)
        CHECK(r.tokens == n * kT);
        CHECK(r.examples == n);
      }
    }
  }
}

TEST_CASE("TokenEvalHook evaluates the held-out set after each epoch of fit", "[towers][eval]") {
  Model m(2);
  const tj::data::TensorDataset data(known_logits(7), "targets");
  const tj::data::TensorDataset train(known_logits(7));
  tj::data::BatchPipeline batches(train, {.batch = 4, .seed = 1});
  std::FILE* out = std::tmpfile();
  tj::report::Progress progress(0, out, false);
  auto hook = std::make_unique<tj::TokenEvalHook>(data, progress, nullptr);
  tj::fit(*m.trainer, batches, {.epochs = 2, .hooks = {hook.get()}});  // the learning rate is 0
  CHECK(hook->evaluated_at() == 4);
  const auto [loss, accuracy] = expected(7);
  CHECK(hook->last().loss == Approx(loss).margin(1e-6));
  CHECK(hook->last().accuracy == accuracy);
  std::fclose(out);
}

TEST_CASE("TokenEvalHook made through make_unique names the user's line in its errors", "[towers][eval][errors]") {
  Model m(2);
  tj::report::Progress quiet(0, std::tmpfile(), false);
  // Labels of another shape than per-token: found when the hook is made.
  tj::HostFeeds flat = known_logits(3);
  flat.at("targets") = tj::HostTensor({3}, tj::DType::i32);
  const tj::data::TensorDataset flat_labels(flat, "targets");
  int line = __LINE__ + 1;
  CHECK_THROWS_WITH(std::make_unique<tj::TokenEvalHook>(flat_labels, quiet, nullptr),
                    Contains("TokenEvalHook: the label array \"targets\" is i32[3]; it scores a class index per token, "
                             "i32 [N, T] (EvalHook scores i32 [N])") &&
                        Contains(here + std::to_string(line)) && !Contains("unique_ptr.h"));
  // A label outside the vocabulary: found at the first evaluation, inside fit.
  tj::HostFeeds bad = known_logits(3);
  bad.at("targets").i32[2 * kT + 4] = 9;
  const tj::data::TensorDataset bad_labels(bad, "targets");
  line = __LINE__ + 1;
  auto hook = std::make_unique<tj::TokenEvalHook>(bad_labels, quiet, nullptr);
  const tj::data::TensorDataset train(known_logits(4));
  tj::data::BatchPipeline batches(train, {.batch = 4});
  CHECK_THROWS_WITH(tj::fit(*m.trainer, batches, {.epochs = 1, .hooks = {hook.get()}}),
                    Contains("evaluate_tokens: label 9 of example 2, token 4 is outside [0, 4); labels are class "
                             "indices of the logits' last axis") &&
                        Contains(here + std::to_string(line)) && !Contains("unique_ptr.h"));
  // Labels with more tokens than the logits.
  const tj::data::TensorDataset long_labels(known_logits(3, kT + 1), "targets");
  line = __LINE__ + 1;
  auto long_hook = std::make_unique<tj::TokenEvalHook>(long_labels, quiet, nullptr);
  CHECK_THROWS_WITH(tj::fit(*m.trainer, batches, {.epochs = 2, .hooks = {long_hook.get()}}),
                    Contains("the model's logits are [3,5,4] for 3 examples, but per-token labels [3,6] need logits "
                             "[n, 6, V]") &&
                        Contains(here + std::to_string(line)));
}

TEST_CASE("EvalHook made through make_unique names the user's line in its errors", "[towers][eval][errors]") {
  tj::report::Progress quiet(0, std::tmpfile(), false);
  tj::HostTensor pixels({4, 2}), labels({4, 2}, tj::DType::i32);
  const tj::data::TensorDataset per_token({{"pixels", pixels}, {"cls", labels}}, "cls");
  int line = __LINE__ + 1;
  CHECK_THROWS_WITH(std::make_unique<tj::EvalHook>(per_token, quiet, nullptr),
                    Contains("EvalHook: the label array \"cls\" is i32[4,2]") && Contains(here + std::to_string(line)) &&
                        !Contains("unique_ptr.h"));
  const tj::data::TensorDataset unlabelled({{"pixels", pixels}});
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(std::make_unique<tj::EvalHook>(unlabelled, quiet, nullptr),
                    Contains("the dataset has no label array \"label\" (its arrays: \"pixels\")") &&
                        Contains(here + std::to_string(line)) && !Contains("unique_ptr.h"));
}
