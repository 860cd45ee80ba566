// Sync CPU towers reduce a sparse gradient (an embedding's rows and values) by concatenating
// the towers' rows and values in tower order (runtime/towers/sparse_reduction.h), never
// building the [V, D] gradient: checked against the same model with sparse = false (the dense
// all-reduce) one SGD step at a time from a shared state, within the two float32 sums' error
// bounds, on 1, 2 and 3 towers with uneven splits and V = 1, 7, 127; bitwise the same run to
// run; and fed to the apply as [B, 3, 4] values, not a [V, 4] table.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>

#include "sparse_tower_model.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::testing::kSparseDim;
using tj::testing::kSparseReads;
using tj::testing::sparse_tower_batch;
using tj::testing::sparse_tower_loss;

namespace {

struct Run {
  std::unique_ptr<tj::Graph> graph = std::make_unique<tj::Graph>();
  std::unique_ptr<tj::TowerTrainer> trainer;
};

Run sparse_run(const tj::Towers& towers, int64_t vocab, bool sparse, double lr) {
  Run r;
  const tj::Tensor loss = sparse_tower_loss(*r.graph, vocab, sparse);
  r.trainer = std::make_unique<tj::TowerTrainer>(*r.graph, loss, towers, tj::sgd(lr));
  return r;
}

tj::Towers cpu_towers(int n, tj::Split split) {
  std::vector<tj::Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(tj::cpu(i));
  return tj::Towers(devices).split(split);
}

constexpr double u = std::numeric_limits<float>::epsilon() / 2;  // float32's unit roundoff
double gamma(int64_t k) { return k * u / (1 - k * u); }

// One SGD step from the shared state `before` on `batch`: the table after it on the dense
// path `wd` and the sparse path `ws`. Both sum the same per-read terms t_p = (c_p + h_p) *
// scale(example of p) for a row, in float32 and in different orders: each within gamma(m + 4)
// S of the exact sum (m reads, the terms themselves a few roundings off), S = sum |t_p|. The
// update w - lr g adds lr times that and a rounding of each result. Untouched rows stay as
// they were on both paths.
void check_step(const tj::HostVariables& before, const tj::HostFeeds& batch, const tj::HostTensor& wd,
                const tj::HostTensor& ws, int64_t vocab, double lr, const std::function<double(int64_t)>& scale) {
  const tj::HostTensor& table = before.at("embed/embeddings");
  const tj::HostTensor& bias = before.at("bias");
  const tj::HostTensor& ids = batch.at("ids");
  const tj::HostTensor& cs = batch.at("c");
  for (int64_t row = 0; row < vocab; ++row) {
    int64_t reads = 0;
    for (int32_t id : ids.i32) reads += id == row;
    for (int64_t d = 0; d < kSparseDim; ++d) {
      const int64_t at = row * kSparseDim + d;
      if (reads == 0) {
        REQUIRE(ws.f32[at] == table.f32[at]);
        REQUIRE(wd.f32[at] == table.f32[at]);
        continue;
      }
      double s = 0;
      for (int64_t p = 0; p < ids.size(); ++p)
        if (ids.i32[p] == row)
          s += std::abs(cs.f32[p * kSparseDim + d] + static_cast<double>(table.f32[at]) + bias.f32[d]) *
               scale(p / kSparseReads);
      const double bound = lr * 2 * gamma(reads + 5) * s + u * (std::abs(wd.f32[at]) + std::abs(ws.f32[at]));
      INFO("row " << row << " column " << d << " read " << reads << " times");
      REQUIRE(std::abs(static_cast<double>(ws.f32[at]) - wd.f32[at]) <= bound);
    }
  }
}

}  // namespace

TEST_CASE("sparse gradients over sync CPU towers equal the dense all-reduce within the sums' bounds",
          "[towers][runtime][sparse]") {
  struct Config { int towers; int64_t batch; tj::Split split; };
  const std::vector<Config> configs = {{1, 5, tj::Split::remainder_last},
                                       {2, 7, tj::Split::remainder_last},   // 3 + 4
                                       {3, 8, tj::Split::balanced},         // 3 + 3 + 2
                                       {3, 10, tj::Split::remainder_last}}; // 3 + 3 + 4
  const double lr = 0.5;
  for (const int64_t vocab : {1, 7, 127})
    for (const Config& c : configs) {
      INFO(c.towers << " towers, batch " << c.batch << ", V = " << vocab);
      Run dense = sparse_run(cpu_towers(c.towers, c.split), vocab, false, lr);
      Run sparse = sparse_run(cpu_towers(c.towers, c.split), vocab, true, lr);
      for (int step = 0; step < 4; ++step) {
        const tj::HostFeeds batch = sparse_tower_batch(c.batch, vocab, 300 + step);
        sparse.trainer->restore(dense.trainer->variables(), dense.trainer->applies());
        const tj::HostVariables before = dense.trainer->variables();
        dense.trainer->step(batch);
        sparse.trainer->step(batch);
        // The sparse path fed the apply the batch's reads, not a table.
        const auto fed = sparse.trainer->last_gradients();
        REQUIRE(fed.at("embed/embeddings")->shape == tj::Shape{c.batch, kSparseReads, kSparseDim});
        const double scale = 1.0 / static_cast<double>(c.batch * kSparseReads * kSparseDim);
        INFO("step " << step);
        check_step(before, batch, dense.trainer->variables().at("embed/embeddings"),
                   sparse.trainer->variables().at("embed/embeddings"), vocab, lr, [&](int64_t) { return scale; });
        // The bias' gradient is dense on both paths, from the same table: the same bits.
        REQUIRE(sparse.trainer->variables().at("bias").f32 == dense.trainer->variables().at("bias").f32);
      }
    }
}

TEST_CASE("sparse gradients over sync CPU towers are bitwise the same run to run", "[towers][runtime][sparse]") {
  for (const tj::SyncVariant variant : {tj::SyncVariant::replicated, tj::SyncVariant::parameter_server}) {
    auto train = [&] {
      Run r = sparse_run(cpu_towers(3, tj::Split::remainder_last).variant(variant), 7, true, 0.5);
      std::vector<double> losses;
      for (int step = 0; step < 6; ++step) losses.push_back(r.trainer->step(sparse_tower_batch(11, 7, 40 + step)).loss);
      return std::make_pair(losses, r.trainer->variables());
    };
    const auto [losses1, values1] = train();
    const auto [losses2, values2] = train();
    CHECK(losses1 == losses2);
    for (const auto& [name, t] : values1) {
      INFO(name);
      CHECK(t.f32 == values2.at(name).f32);
      CHECK(t.i32 == values2.at(name).i32);
    }
  }
}

TEST_CASE("sparse gradients over sync CPU towers weigh the towers as the reduction says", "[towers][runtime][sparse]") {
  // The seed's per-tower mean weighs an uneven split's towers 1/N, not n_i/B: the sparse path
  // weighs each tower's values by the same factor, so it still follows the dense path.
  for (const auto& reduction : {tj::Reduction{tj::SyncPerTowerMean{}}, tj::Reduction{tj::SyncSum{}}}) {
    Run dense = sparse_run(cpu_towers(2, tj::Split::remainder_last).reduce(reduction), 7, false, 0.5);
    Run sparse = sparse_run(cpu_towers(2, tj::Split::remainder_last).reduce(reduction), 7, true, 0.5);
    const tj::HostFeeds batch = sparse_tower_batch(9, 7, 5);
    const tj::HostVariables before = dense.trainer->variables();
    dense.trainer->step(batch);
    sparse.trainer->step(batch);
    // Slices 4 and 5: a read of example e weighs (1/2 or 1) / (n_i 3 4).
    const double share = std::holds_alternative<tj::SyncSum>(reduction) ? 1.0 : 0.5;
    check_step(before, batch, dense.trainer->variables().at("embed/embeddings"),
               sparse.trainer->variables().at("embed/embeddings"), 7, 0.5,
               [&](int64_t e) { return share / ((e < 4 ? 4 : 5) * kSparseReads * kSparseDim); });
  }
}

TEST_CASE("sparse gradients over sync CPU towers with accumulated micro-batches follow the dense path",
          "[towers][runtime][sparse]") {
  // 3 micro-batches of 13 examples (5 + 4 + 4), each over 2 towers: every (micro-batch, tower)
  // part joins the concatenation in batch order, weighted by its examples' share.
  Run dense = sparse_run(cpu_towers(2, tj::Split::remainder_last), 7, false, 0.5);
  Run sparse = sparse_run(cpu_towers(2, tj::Split::remainder_last), 7, true, 0.5);
  const tj::HostFeeds batch = sparse_tower_batch(13, 7, 8);
  const tj::HostVariables before = dense.trainer->variables();
  dense.trainer->step(batch, {.accumulate = 3});
  sparse.trainer->step(batch, {.accumulate = 3});
  REQUIRE(sparse.trainer->last_gradients().at("embed/embeddings")->shape == tj::Shape{13, kSparseReads, kSparseDim});
  check_step(before, batch, dense.trainer->variables().at("embed/embeddings"),
             sparse.trainer->variables().at("embed/embeddings"), 7, 0.5,
             [](int64_t) { return 1.0 / (13 * kSparseReads * kSparseDim); });
}

TEST_CASE("sparse gradients on one async CPU tower: the sync step's rows, applied as they come",
          "[towers][runtime][sparse]") {
  // One tower: its apply takes factor 1, so SGD follows the dense path within the sums' bounds
  // and Adam is the sync tower's SparseAdam bit for bit (the same rows, values and program).
  const double lr = 0.5;
  for (const int64_t vocab : {1, 7, 127}) {
    INFO("V = " << vocab);
    Run dense = sparse_run(cpu_towers(1, tj::Split::remainder_last).reduce(tj::AsyncApply{}), vocab, false, lr);
    Run sparse = sparse_run(cpu_towers(1, tj::Split::remainder_last).reduce(tj::AsyncApply{}), vocab, true, lr);
    for (int step = 0; step < 4; ++step) {
      const tj::HostFeeds batch = sparse_tower_batch(6, vocab, 400 + step);
      sparse.trainer->restore(dense.trainer->variables(), dense.trainer->applies());
      const tj::HostVariables before = dense.trainer->variables();
      dense.trainer->step(batch);
      sparse.trainer->step(batch);
      INFO("step " << step);
      check_step(before, batch, dense.trainer->variables().at("embed/embeddings"),
                 sparse.trainer->variables().at("embed/embeddings"), vocab, lr,
                 [](int64_t) { return 1.0 / (6 * kSparseReads * kSparseDim); });
    }
  }
  auto adam_run = [](tj::Towers towers) {
    tj::Graph g;
    const tj::Tensor loss = sparse_tower_loss(g, 37, true);
    tj::TowerTrainer trainer(g, loss, std::move(towers), tj::adam(0.05));
    for (int step = 0; step < 5; ++step) trainer.step(sparse_tower_batch(5, 37, 60 + step));
    return trainer.variables();
  };
  const tj::HostVariables sync = adam_run(cpu_towers(1, tj::Split::remainder_last));
  const tj::HostVariables async = adam_run(cpu_towers(1, tj::Split::remainder_last).reduce(tj::AsyncApply{}));
  for (const auto& [name, t] : sync) {
    INFO(name);
    CHECK(t.f32 == async.at(name).f32);
  }
}

TEST_CASE("async CPU towers apply every tower's sparse rows once, scaled by 1/N, none lost",
          "[towers][runtime][sparse]") {
  // loss = mean(c . embedding(ids)) over a tower's slice: its gradient does not depend on the
  // table, so whatever order the towers apply in, the table's total change is the sum of the
  // applied steps: tower i adds -lr (1/N) c_p / (n_i 3 4) to the row of every read p.
  const double lr = 0.5;
  for (const int n : {2, 3})
    for (const int64_t vocab : {1, 7, 127}) {
      INFO(n << " towers, V = " << vocab);
      tj::Graph g;
      tj::GraphScope use(g);
      auto ids = tj::input("ids", {tj::kBatch, kSparseReads}, tj::DType::i32);
      auto c = tj::input("c", {tj::kBatch, kSparseReads, kSparseDim});
      auto loss = tj::mean(c * tj::embedding(ids, vocab, kSparseDim, "embed"));
      tj::TowerTrainer trainer(g, loss, cpu_towers(n, tj::Split::remainder_last).reduce(tj::AsyncApply{}), tj::sgd(lr));
      const tj::HostTensor first = trainer.variables().at("embed/embeddings");
      std::vector<double> expected(first.f32.begin(), first.f32.end());
      for (int step = 0; step < 5; ++step) {
        const tj::HostFeeds batch = sparse_tower_batch(10, vocab, 500 + step);
        const std::vector<int64_t> slices = trainer.step(batch).slices;
        int64_t example = 0;
        for (const int64_t slice : slices) {
          for (int64_t p = example * kSparseReads; p < (example + slice) * kSparseReads; ++p)
            for (int64_t d = 0; d < kSparseDim; ++d)
              expected[batch.at("ids").i32[p] * kSparseDim + d] -=
                  lr / n * batch.at("c").f32[p * kSparseDim + d] / (slice * kSparseReads * kSparseDim);
          example += slice;
        }
      }
      CHECK(trainer.applies() == n * 5);
      const tj::HostTensor& table = trainer.variables().at("embed/embeddings");
      for (int64_t i = 0; i < table.size(); ++i) CHECK(table.f32[i] == Approx(expected[i]).epsilon(1e-5).margin(1e-6));
    }
}

// Not run by default (hidden): the figures of docs/strategies.md's "Sparse gradients across
// towers". Two CPU towers, SGD, an embedding [V, 128] read by ids [128, 16] (2048 rows) plus a
// bias, loss mean(c h + h^2 / 2): the time of a step, sparse against sparse = false.
TEST_CASE("sparse against dense gradients over two CPU towers: step time", "[.][bench][sparse]") {
  for (const int64_t vocab : {256, 32768})
    for (const bool sparse : {true, false}) {
      tj::Graph graph;
      tj::Tensor loss;
      {
        tj::GraphScope use(graph);
        auto ids = tj::input("ids", {tj::kBatch, 16}, tj::DType::i32);
        auto c = tj::input("c", {tj::kBatch, 16, 128});
        auto h = tj::embedding(ids, vocab, 128, "embed", {.sparse = sparse}) + tj::variable("bias", {128});
        loss = tj::mean(c * h + 0.5 * h * h);
      }
      tj::TowerTrainer trainer(graph, loss, tj::Towers{tj::cpu(0), tj::cpu(1)}, tj::sgd(0.1));
      tj::HostTensor ids(tj::Shape{128, 16}, tj::DType::i32), c(tj::Shape{128, 16, 128});
      for (size_t i = 0; i < ids.i32.size(); ++i) ids.i32[i] = static_cast<int32_t>((i * 7919) % vocab);
      for (size_t i = 0; i < c.f32.size(); ++i) c.f32[i] = static_cast<float>(i % 13) / 13.0f - 0.5f;
      const tj::HostFeeds batch{{"ids", ids}, {"c", c}};
      trainer.step(batch);  // warm
      const int steps = 10;
      const auto t0 = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) trainer.step(batch);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("V = %5ld  %-6s  %.2f ms a step\n", static_cast<long>(vocab), sparse ? "sparse" : "dense",
                  1e3 * secs / steps);
    }
}
