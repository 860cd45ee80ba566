// CPU towers: sync averaging equals one tower on the whole batch, the seed's per-tower mean
// differs where it should, sync is bitwise reproducible, async applies every tower's gradient.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "runtime/cuda/driver_api.h"
#include "tower_test_model.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::testing::batch_of;
using tj::testing::largest_relative_difference;
using tj::testing::small_mlp_loss;

namespace {

// A model and the trainer that owns its graph's compiled programs.
struct Run {
  std::unique_ptr<tj::Graph> graph = std::make_unique<tj::Graph>();
  std::unique_ptr<tj::TowerTrainer> trainer;
};

Run mlp_run(tj::Towers towers, const tj::Optimizer& opt) {
  Run r;
  const tj::Tensor loss = small_mlp_loss(*r.graph);
  r.trainer = std::make_unique<tj::TowerTrainer>(*r.graph, loss, std::move(towers), opt);
  return r;
}

tj::Towers cpu_towers(int n) {
  std::vector<tj::Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(tj::cpu(i));
  return tj::Towers(devices);
}

}  // namespace

TEST_CASE("sync average over N towers equals one tower on the whole batch after 20 steps", "[towers][runtime]") {
  struct Config { int towers; int64_t batch; tj::Split split; };
  const std::vector<Config> configs = {{1, 15, tj::Split::remainder_last}, {2, 15, tj::Split::remainder_last},
                                       {3, 64, tj::Split::remainder_last}, {4, 64, tj::Split::remainder_last},
                                       {3, 64, tj::Split::balanced}, {4, 7, tj::Split::remainder_last}};
  const std::vector<std::pair<const char*, tj::Optimizer>> optimizers = {
      {"sgd", tj::sgd(0.1)}, {"momentum", tj::momentum(0.1, 0.9)}, {"adam", tj::adam(0.01)}};
  for (const auto& [opt_name, opt] : optimizers)
    for (const Config& c : configs) {
      Run one = mlp_run(cpu_towers(1), opt);
      Run many = mlp_run(cpu_towers(c.towers).split(c.split), opt);
      for (int step = 0; step < 20; ++step) {
        const auto batch = batch_of(c.batch, 100 + step);
        const double l1 = one.trainer->step(batch).loss, ln = many.trainer->step(batch).loss;
        REQUIRE(std::abs(l1 - ln) <= 1e-5 * std::max(1.0, std::abs(l1)));
      }
      INFO(opt_name << " on " << c.towers << " towers, batch " << c.batch << ": relative 1e-5");
      CHECK(largest_relative_difference(one.trainer->variables(), many.trainer->variables()) <= 1e-5);
      CHECK(many.trainer->applies() == 20);
    }
}

TEST_CASE("sync training is bitwise identical run to run", "[towers][runtime]") {
  Run a = mlp_run(cpu_towers(3), tj::adam(0.01)), b = mlp_run(cpu_towers(3), tj::adam(0.01));
  for (int step = 0; step < 10; ++step) {
    a.trainer->step(batch_of(64, step));
    b.trainer->step(batch_of(64, step));
  }
  for (const auto& [name, t] : a.trainer->variables())
    CHECK(std::memcmp(t.data(), b.trainer->variables().at(name).data(), t.size() * 4) == 0);
}

TEST_CASE("the seed's per-tower mean averages tower means, unlike the weighted average", "[towers][runtime]") {
  // With SGD one step is linear in the gradient, so the seed's step is the mean of the steps
  // each tower would take alone, and the weighted one their slice-weighted mean (7 and 8 of 15).
  const auto batch = batch_of(15, 7);
  Run a = mlp_run(cpu_towers(1), tj::sgd(0.5)), b = mlp_run(cpu_towers(1), tj::sgd(0.5));
  Run seed = mlp_run(cpu_towers(2).reduce(tj::SyncPerTowerMean{}), tj::sgd(0.5));
  Run weighted = mlp_run(cpu_towers(2), tj::sgd(0.5));
  tj::HostFeeds first, second;
  for (const auto& [name, t] : batch) {
    const int64_t row = t.size() / 15;
    tj::Shape s7 = t.shape, s8 = t.shape;
    s7[0] = 7, s8[0] = 8;
    first[name] = tj::HostTensor(s7, t.dtype);
    second[name] = tj::HostTensor(s8, t.dtype);
    std::memcpy(first[name].data(), t.data(), 7 * row * 4);
    std::memcpy(second[name].data(), static_cast<const char*>(t.data()) + 7 * row * 4, 8 * row * 4);
  }
  a.trainer->step(first);
  b.trainer->step(second);
  CHECK(seed.trainer->step(batch).slices == std::vector<int64_t>{7, 8});
  weighted.trainer->step(batch);
  double seed_error = 0, weighted_error = 0, seed_vs_weighted = 0;
  for (const auto& [name, w] : seed.trainer->variables())
    for (int64_t k = 0; k < w.size(); ++k) {
      const float wa = a.trainer->variables().at(name).f32[k], wb = b.trainer->variables().at(name).f32[k];
      seed_error = std::max<double>(seed_error, std::abs(w.f32[k] - (wa + wb) / 2));
      const float ww = weighted.trainer->variables().at(name).f32[k];
      weighted_error = std::max<double>(weighted_error, std::abs(ww - (7 * wa + 8 * wb) / 15));
      seed_vs_weighted = std::max<double>(seed_vs_weighted, std::abs(w.f32[k] - ww));
    }
  CHECK(seed_error <= 1e-6);
  CHECK(weighted_error <= 1e-6);
  CHECK(seed_vs_weighted > 1e-4);
}

TEST_CASE("last_gradients: the averaged gradient a sync step applied, and none with async towers", "[towers][runtime]") {
  // Plain SGD at lr 0.5 applies w1 = fl(w0 - fl(0.5 g)): 0.5 g is exact, so
  // |w0 - w1 - 0.5 g| <= u |w1| with u = 2^-24 (one rounding), checked with u = 2^-23.
  Run sync = mlp_run(cpu_towers(3), tj::sgd(0.5));  // 7 examples over 3 towers: 2, 2, 3
  CHECK(sync.trainer->last_gradients().empty());    // no step yet
  const tj::HostVariables before = sync.trainer->variables();
  sync.trainer->step(batch_of(7, 1));
  const auto gradients = sync.trainer->last_gradients();
  REQUIRE(gradients.size() == 4);  // the two layers' kernels and biases
  for (const auto& [name, g] : gradients) {
    INFO(name);
    const tj::HostTensor& w0 = before.at(name);
    const tj::HostTensor& w1 = sync.trainer->variables().at(name);
    REQUIRE(g->shape == w0.shape);
    for (int64_t k = 0; k < g->size(); ++k)
      CHECK(std::abs(static_cast<double>(w0.f32[k]) - w1.f32[k] - 0.5 * g->f32[k]) <=
            std::ldexp(std::abs(static_cast<double>(w1.f32[k])), -23));
  }
  Run async = mlp_run(cpu_towers(2).reduce(tj::AsyncApply{}), tj::sgd(0.5));
  async.trainer->step(batch_of(7, 1));
  CHECK(async.trainer->last_gradients().empty());
}

TEST_CASE("async with one tower equals sync", "[towers][runtime]") {
  Run sync = mlp_run(cpu_towers(1), tj::momentum(0.1, 0.9));
  Run async = mlp_run(cpu_towers(1).reduce(tj::AsyncApply{}), tj::momentum(0.1, 0.9));
  for (int step = 0; step < 10; ++step) {
    sync.trainer->step(batch_of(9, step));
    async.trainer->step(batch_of(9, step));
  }
  CHECK(largest_relative_difference(sync.trainer->variables(), async.trainer->variables()) == 0);
}

TEST_CASE("async towers apply every gradient once, scaled by 1/N, none lost", "[towers][runtime]") {
  // loss = mean over the batch of x . w: its gradient, the batch mean of x, does not depend on
  // w, so whatever order the towers apply in, the total change is exactly the sum of the
  // applied steps.
  for (int n : {2, 3, 4}) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch, 6});
    auto w = tj::variable("w", {6, 1}, {.init = tj::init::zeros()});
    auto loss = tj::mean(tj::matmul(x, w));
    tj::TowerTrainer trainer(g, loss, cpu_towers(n).reduce(tj::AsyncApply{}), tj::sgd(0.1));
    std::vector<double> expected(6, 0.0);
    const int steps = 25;
    for (int step = 0; step < steps; ++step) {
      auto batch = batch_of(12, 50 + step);
      tj::HostFeeds feeds{{"x", tj::HostTensor({12, 6})}};
      std::mt19937 rng(step);
      for (float& v : feeds["x"].f32) v = static_cast<float>(rng() % 100) / 50.0f;
      const auto slices = trainer.step(feeds).slices;
      int64_t offset = 0;
      for (int64_t s : slices) {  // tower i applies -0.1 * (1/N) * mean of its rows
        for (int j = 0; j < 6; ++j) {
          double mean = 0;
          for (int64_t r = offset; r < offset + s; ++r) mean += feeds["x"].f32[r * 6 + j];
          expected[j] -= 0.1 / n * mean / s;
        }
        offset += s;
      }
    }
    CHECK(trainer.applies() == n * steps);
    for (int j = 0; j < 6; ++j) CHECK(trainer.variables().at("w").f32[j] == Approx(expected[j]).epsilon(1e-5));
  }
}

TEST_CASE("async towers train a logistic regression", "[towers][runtime]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 2});
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  auto loss = tj::mean(tj::softmax_cross_entropy(tj::dense(x, 2, "logistic"), labels));
  tj::TowerTrainer trainer(g, loss, cpu_towers(3).reduce(tj::AsyncApply{}), tj::sgd(0.5));
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    tj::HostTensor xs({30, 2}), ys({30}, tj::DType::i32);
    std::mt19937 rng(step);
    std::normal_distribution<float> noise(0, 0.3f);
    for (int i = 0; i < 30; ++i) {
      ys.i32[i] = i % 2;
      xs.f32[2 * i] = (i % 2 ? 1.0f : -1.0f) + noise(rng);
      xs.f32[2 * i + 1] = noise(rng);
    }
    const double l = trainer.step({{"x", xs}, {"labels", ys}}).loss;
    (step == 0 ? first : last) = l;
  }
  CHECK(first > 0.5);
  CHECK(last < 0.1);
}

TEST_CASE("bad tower set-ups are named at build or step time", "[towers][runtime]") {
  const std::string here = "tests/runtime/test_tower_trainer.cpp:";
  {
    Run r = mlp_run(cpu_towers(4), tj::sgd(0.1));
    CHECK_THROWS_WITH(r.trainer->step(batch_of(3, 1)), Catch::Contains("more towers") && Catch::Contains("3"));
  }
  if (tj::cuda::cuda_device_count() == 0) {
    // A GPU tower compiles for its GPU; on a machine without one that is the error, naming the
    // line that builds the trainer.
    tj::Graph g;
    tj::GraphScope use(g);
    auto loss = tj::mean(tj::matmul(tj::input("x", {kBatch, 3}), tj::variable("w", {3, 1})));
    const int line = __LINE__ + 1;
    CHECK_THROWS_WITH(tj::TowerTrainer(g, loss, tj::Towers{tj::cpu(0), tj::gpu(0)}, tj::sgd(0.1)),
                      Catch::Contains("no CUDA device") && Catch::Contains(here + std::to_string(line)));
  }
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 3});
  auto used = tj::variable("used", {3, 1});
  tj::variable("unused", {3, 1});
  auto loss = tj::mean(tj::matmul(x, used));
  const int line = __LINE__ + 1;
  CHECK_THROWS_WITH(tj::TowerTrainer(g, loss, cpu_towers(2), tj::sgd(0.1)),
                    Catch::Contains("\"unused\"") && Catch::Contains("does not depend on it") &&
                        Catch::Contains(here + std::to_string(line)));
}

TEST_CASE("free-running async towers respect the staleness bound and lose no apply", "[towers][runtime]") {
  for (std::optional<int64_t> bound : {std::optional<int64_t>(0), std::optional<int64_t>(2), std::optional<int64_t>()}) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch, 4});
    auto w = tj::variable("w", {4, 1}, {.init = tj::init::zeros()});
    auto loss = tj::mean(tj::matmul(x, w));
    tj::TowerTrainer trainer(g, loss, cpu_towers(3).reduce(tj::AsyncApply{.max_staleness = bound}), tj::sgd(0.1));
    // Tower t always sees rows of (t + 1): its gradient is (t + 1) in every column.
    auto batch_for = [](int tower, int) {
      tj::HostTensor xs({2 + tower, 4});
      for (float& v : xs.f32) v = static_cast<float>(tower + 1);
      return tj::HostFeeds{{"x", xs}};
    };
    const auto report = trainer.run_async(30, batch_for);
    INFO("bound " << (bound ? std::to_string(*bound) : "none") << ": max lead " << report.max_lead
                  << ", max staleness " << report.max_staleness << ", mean " << report.mean_staleness);
    CHECK(report.applies == 90);
    CHECK(trainer.applies() == 90);
    if (bound) CHECK(report.max_lead <= *bound);
    // Every apply lands: w = -0.1 * (1/3) * 30 * (1 + 2 + 3) in every column.
    for (float v : trainer.variables().at("w").f32) CHECK(v == Approx(-0.1 / 3 * 30 * 6).epsilon(1e-5));
  }
}

TEST_CASE("every optimiser trains the same over 3 towers as over one", "[towers][runtime]") {
  const std::vector<std::pair<const char*, tj::Optimizer>> optimizers = {
      {"adamw", tj::adamw(0.01)}, {"rmsprop", tj::rmsprop(0.01)}, {"adagrad", tj::adagrad(0.1)},
      {"nesterov", tj::momentum(0.1, 0.9, {.nesterov = true})}};
  for (const auto& [name, opt] : optimizers) {
    Run one = mlp_run(cpu_towers(1), opt), three = mlp_run(cpu_towers(3), opt);
    for (int step = 0; step < 20; ++step) {
      one.trainer->step(batch_of(64, step));
      three.trainer->step(batch_of(64, step));
    }
    INFO(name);
    CHECK(largest_relative_difference(one.trainer->variables(), three.trainer->variables()) <= 1e-5);
  }
}

TEST_CASE("batch norm under sync towers: the moving mean follows the whole batch", "[towers][runtime]") {
  // Batch norm on the input itself: each tower's batch mean is its slice's mean, and the
  // slice-weighted average of their moving-mean updates is the update the whole batch gives.
  for (int n : {1, 2, 3}) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch, 5});
    auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
    auto normed = tj::batch_norm(x, /*training=*/true, "bn", {.momentum = 0.9});
    auto loss = tj::mean(tj::softmax_cross_entropy(tj::dense(normed, 3, "fc"), labels));
    tj::TowerTrainer trainer(g, loss, cpu_towers(n), tj::sgd(0.1));
    const auto batch = batch_of(15, 3);
    trainer.step(batch);
    for (int c = 0; c < 5; ++c) {
      double mean = 0;
      for (int i = 0; i < 15; ++i) mean += batch.at("x").f32[i * 5 + c] / 15;
      INFO(n << " towers, channel " << c);
      CHECK(trainer.variables().at("bn/moving_mean").f32[c] == Approx(0.1 * mean).margin(1e-6));
    }
  }
}

TEST_CASE("an out-of-range label on a later tower names its example in the whole batch", "[towers][runtime][errors]") {
  Run r = mlp_run(cpu_towers(2), tj::sgd(0.1));
  tj::HostFeeds batch = batch_of(15, 3);
  batch.at("labels").i32[10] = 5;  // 3 classes; tower 1 holds examples 7 to 14
  CHECK_THROWS_WITH(r.trainer->step(batch), Catch::Contains("input \"labels\" holds label 5 at example 10 of step()'s "
                                                            "batch (apply 1), out of range [0, 3) for one_hot"));
}

TEST_CASE("accumulating 3 micro-batches is one step on the whole batch", "[towers][runtime]") {
  // 2 towers, batch 31: micro-batches of 11, 10, 10, each split 5/6 or 5/5, against one step
  // split 15/16. Adam makes any gradient difference visible in the variables. (Batch norm
  // would differ: it normalises each micro-batch by its own statistics, as in PyTorch.)
  Run whole = mlp_run(cpu_towers(2), tj::adam(0.01));
  Run accumulated = mlp_run(cpu_towers(2), tj::adam(0.01));
  for (int s = 0; s < 5; ++s) {
    const tj::HostFeeds batch = batch_of(31, 40 + s);
    const auto a = whole.trainer->step(batch);
    const auto b = accumulated.trainer->step(batch, {.accumulate = 3});
    INFO("step " << s);
    // The same sums in another grouping: float roundings of each example's terms (the loss is
    // a mean of about 1, its terms' roundings some 1e-7 each).
    CHECK(b.loss == Approx(a.loss).epsilon(1e-5));
    CHECK(b.slices == std::vector<int64_t>{15, 16});
  }
  CHECK(accumulated.trainer->applies() == 5);
  CHECK(largest_relative_difference(whole.trainer->variables(), accumulated.trainer->variables()) < 1e-5);
}

TEST_CASE("accumulation needs sync-average towers and enough examples", "[towers][runtime][errors]") {
  Run async = mlp_run(cpu_towers(2).reduce(tj::AsyncApply{}), tj::sgd(0.1));
  CHECK_THROWS_WITH(async.trainer->step(batch_of(16, 1), {.accumulate = 2}),
                    Catch::Contains("accumulating over 2 micro-batches needs SyncAverage towers"));
  Run sync = mlp_run(cpu_towers(2), tj::sgd(0.1));
  CHECK_THROWS_WITH(sync.trainer->step(batch_of(5, 1), {.accumulate = 3}),
                    Catch::Contains("5 examples cannot make 3 micro-batches for 2 towers; feed at least 6"));
  CHECK_THROWS_WITH(sync.trainer->step(batch_of(5, 1), {.accumulate = 0}), Catch::Contains("accumulate 0 must be at least 1"));
}
