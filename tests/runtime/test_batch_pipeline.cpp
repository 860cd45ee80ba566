// The input pipeline: the same batches whatever the threads and depth, every example once per
// epoch, the last partial batch's rules, resuming from a position, shutdown and worker errors.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "dsl/error.h"
#include "runtime/data/batch_pipeline.h"

namespace tj = towerjit;
using tj::data::BatchPipeline;
using tj::data::PipelineOptions;
using tj::data::PipelinePosition;

namespace {

// Example i has label i and features i + j / 10, so a batch shows which rows it holds.
tj::data::Dataset synthetic(int64_t n, int64_t features = 3) {
  tj::data::Dataset d{tj::HostTensor(tj::Shape{n, features}), tj::HostTensor(tj::Shape{n}, tj::DType::i32)};
  for (int64_t i = 0; i < n; ++i) {
    d.labels.i32[i] = static_cast<int32_t>(i);
    for (int64_t j = 0; j < features; ++j) d.images.f32[i * features + j] = static_cast<float>(i) + j / 10.0f;
  }
  return d;
}

// The labels (= row numbers) of the next `count` batches, checking each batch's images match.
std::vector<std::vector<int32_t>> take(BatchPipeline& p, const tj::data::Dataset& d, int count) {
  std::vector<std::vector<int32_t>> rows;
  const int64_t features = d.images.shape[1];
  for (int i = 0; i < count; ++i) {
    const auto b = p.next();
    const auto& labels = b.feeds.at("label").i32;
    const auto& images = b.feeds.at("image");
    REQUIRE(images.shape == tj::Shape{static_cast<int64_t>(labels.size()), features});
    for (size_t r = 0; r < labels.size(); ++r)
      REQUIRE(images.f32[r * features + 1] == d.images.f32[labels[r] * features + 1]);
    rows.push_back(labels);
  }
  return rows;
}

}  // namespace

TEST_CASE("pipeline batches are identical for any thread count and depth", "[pipeline]") {
  const auto data = synthetic(127);
  PipelineOptions o{.batch = 10, .seed = 7, .threads = 1, .depth = 1};
  BatchPipeline reference(data, o);
  const auto expected = take(reference, data, 3 * 13);
  // Batch k of epoch e is rows epoch_order(e)[10k, 10k + 10).
  const auto order1 = tj::data::epoch_order(127, 7, 1);
  CHECK(expected[13 + 2] == std::vector<int32_t>(order1.begin() + 20, order1.begin() + 30));
  for (int threads : {1, 2, 4})
    for (int depth : {1, 2, 7}) {
      INFO("threads " << threads << ", depth " << depth);
      o.threads = threads, o.depth = depth;
      BatchPipeline p(data, o);
      CHECK(take(p, data, 3 * 13) == expected);
    }
}

TEST_CASE("pipeline visits every example exactly once per epoch", "[pipeline]") {
  const auto data = synthetic(127);
  BatchPipeline p(data, {.batch = 10, .seed = 3});
  REQUIRE(p.batches_per_epoch() == 13);
  std::vector<std::vector<int32_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int32_t> seen;
    for (const auto& rows : take(p, data, 13)) seen.insert(seen.end(), rows.begin(), rows.end());
    epochs.push_back(seen);
    std::sort(seen.begin(), seen.end());
    std::vector<int32_t> all(127);
    for (int i = 0; i < 127; ++i) all[i] = i;
    CHECK(seen == all);
  }
  CHECK(epochs[0] != epochs[1]);  // each epoch has its own shuffle
  CHECK(epochs[1] != epochs[2]);

  BatchPipeline in_order(data, {.batch = 10, .shuffle = false});
  CHECK(take(in_order, data, 1)[0] == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("pipeline keeps the last partial batch unless drop_last or min_batch drop it", "[pipeline]") {
  const auto data = synthetic(7);
  auto sizes = [&](PipelineOptions o) {
    BatchPipeline p(data, o);
    std::vector<int64_t> s;
    for (int i = 0; i < 2 * p.batches_per_epoch(); ++i) s.push_back(p.next().size());
    return s;
  };
  CHECK(sizes({.batch = 3}) == std::vector<int64_t>{3, 3, 1, 3, 3, 1});
  CHECK(sizes({.batch = 3, .drop_last = true}) == std::vector<int64_t>{3, 3, 3, 3});
  CHECK(sizes({.batch = 3, .min_batch = 2}) == std::vector<int64_t>{3, 3, 3, 3});
  CHECK(sizes({.batch = 7}) == std::vector<int64_t>{7, 7});
  CHECK(sizes({.batch = 1}) == std::vector<int64_t>(14, 1));
  const auto eight = synthetic(8);
  BatchPipeline p(eight, {.batch = 3, .min_batch = 2});  // a last batch of 2 is enough
  CHECK(p.batches_per_epoch() == 3);

  // Each batch says where it is; the position moves to the next epoch after the last batch.
  BatchPipeline q(data, {.batch = 3});
  for (int64_t i = 0; i < 3; ++i) {
    CHECK(q.position() == PipelinePosition{0, i});
    const auto b = q.next();
    CHECK((b.epoch == 0 && b.index == i && b.batches_in_epoch == 3));
  }
  CHECK(q.position() == PipelinePosition{1, 0});
  CHECK(q.next().epoch == 1);
}

TEST_CASE("a pipeline resumed from a position delivers the batches an uninterrupted one would", "[pipeline]") {
  const auto data = synthetic(127);
  const PipelineOptions o{.batch = 10, .seed = 11, .threads = 2, .depth = 3};
  BatchPipeline whole(data, o);
  const auto uninterrupted = take(whole, data, 60);
  for (int stop : {0, 5, 13, 26, 31}) {
    INFO("stopped after " << stop << " batches");
    BatchPipeline first(data, o);
    take(first, data, stop);
    const PipelinePosition at = first.position();
    CHECK(at == PipelinePosition{stop / 13, stop % 13});
    PipelineOptions other = o;
    other.threads = 3, other.depth = 1;  // the machine resuming may differ
    BatchPipeline resumed(data, other, at);
    const auto rest = take(resumed, data, 60 - stop);
    CHECK(rest == std::vector<std::vector<int32_t>>(uninterrupted.begin() + stop, uninterrupted.end()));
  }
}

TEST_CASE("pipeline epoch_order is a fixed permutation of seed and epoch", "[pipeline]") {
  const auto a = tj::data::epoch_order(1000, 5, 2);
  CHECK(a == tj::data::epoch_order(1000, 5, 2));
  CHECK(a != tj::data::epoch_order(1000, 6, 2));
  CHECK(a != tj::data::epoch_order(1000, 5, 3));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == tj::data::epoch_order(1000, 5, 2, /*shuffle=*/false));
  CHECK(tj::data::epoch_order(0, 1, 0).empty());
  CHECK(tj::data::epoch_order(1, 1, 0) == std::vector<int64_t>{0});
  // Checkpoints resume this order on any machine and build: a change here breaks them.
  CHECK(tj::data::epoch_order(10, 1, 0) == std::vector<int64_t>{1, 6, 8, 2, 7, 9, 3, 4, 5, 0});
}

TEST_CASE("destroying a pipeline with a full queue does not hang", "[pipeline]") {
  const auto data = synthetic(50);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    BatchPipeline p(data, {.batch = 4, .threads = 4, .depth = 2});
    if (i % 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let the queue fill
  }
  {  // Workers in the middle of a slow transform finish that batch and stop.
    PipelineOptions o{.batch = 4, .threads = 2, .depth = 8};
    o.transform = [](tj::data::Batch&) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
    BatchPipeline p(data, o);
    p.next();
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("pipeline next() rethrows the exception a worker hit, and keeps doing so", "[pipeline]") {
  const auto data = synthetic(50);
  PipelineOptions o{.batch = 4, .threads = 2, .depth = 4};
  o.transform = [](tj::data::Batch& b) {
    if (b.epoch == 0 && b.index == 2) throw std::runtime_error("augmentation failed on batch 2");
  };
  BatchPipeline p(data, o);
  CHECK(p.next().index == 0);
  CHECK(p.next().index == 1);
  CHECK_THROWS_WITH(p.next(), "augmentation failed on batch 2");
  CHECK(p.position() == PipelinePosition{0, 2});  // a checkpoint now resumes at the failed batch
  CHECK_THROWS_WITH(p.next(), "augmentation failed on batch 2");
}

TEST_CASE("pipeline errors name the value and the fix", "[pipeline]") {
  const auto data = synthetic(7);
  using Catch::Contains;
  CHECK_THROWS_WITH(BatchPipeline(data, {.batch = 0}), Contains("batch size 0 is not positive"));
  const auto empty = synthetic(0);
  CHECK_THROWS_WITH(BatchPipeline(empty, {.batch = 4}), Contains("dataset is empty"));
  CHECK_THROWS_WITH(BatchPipeline(data, {.batch = 8}),
                    Contains("batch size 8 is larger than the dataset (7 examples)") && Contains("at most 7"));
  CHECK_THROWS_WITH(BatchPipeline(data, {.batch = 3, .min_batch = 4}), Contains("min_batch 4"));
  CHECK_THROWS_WITH(BatchPipeline(data, {.batch = 3, .threads = 0}), Contains("at least 1 thread"));
  CHECK_THROWS_WITH(BatchPipeline(data, {.batch = 3}, {0, 3}),
                    Contains("cannot start at epoch 0, batch 3: an epoch here has 3 batches") &&
                        Contains("test_batch_pipeline.cpp"));
  CHECK_THROWS_AS(BatchPipeline(data, {.batch = 3}, {-1, 0}), tj::Error);
  auto mismatched = synthetic(7);
  mismatched.labels = tj::HostTensor(tj::Shape{6}, tj::DType::i32);
  CHECK_THROWS_WITH(BatchPipeline(mismatched, {.batch = 3}), Contains("do not belong together"));
}
