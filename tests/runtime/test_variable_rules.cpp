// Per-variable reductions (Towers::with, runtime/towers/strategies/sync_async_by_variable.cpp):
// an AsyncApply rule on the embedding applies each tower's own sparse gradient while the bias
// is averaged. Checked: the glob; one tower equals the plain sync step bitwise; two towers
// equal the sync average (scale_gradient) and the sync sum (without it) within the float32
// sums' bounds, one SGD step at a time from a shared state; the errors at the rule's line.
#include <catch2/catch.hpp>
#include <cmath>
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

const std::string here = "tests/runtime/test_variable_rules.cpp:";

struct Run {
  std::unique_ptr<tj::Graph> graph = std::make_unique<tj::Graph>();
  std::unique_ptr<tj::TowerTrainer> trainer;
};

Run rules_run(const tj::Towers& towers, int64_t vocab, bool sparse = true) {
  Run r;
  const tj::Tensor loss = sparse_tower_loss(*r.graph, vocab, sparse);
  r.trainer = std::make_unique<tj::TowerTrainer>(*r.graph, loss, towers, tj::sgd(0.5));
  return r;
}

tj::Towers two_towers() { return tj::Towers{tj::cpu(0), tj::cpu(1)}; }

constexpr double u = std::numeric_limits<float>::epsilon() / 2;
double gamma(int64_t k) { return k * u / (1 - k * u); }

}  // namespace

TEST_CASE("variable patterns are globs over the whole name", "[towers][strategy]") {
  CHECK(tj::matches_pattern("embed/*", "embed/embeddings"));
  CHECK(tj::matches_pattern("*", "fc1/kernel"));
  CHECK(tj::matches_pattern("fc?/kernel", "fc1/kernel"));
  CHECK(tj::matches_pattern("*/kernel", "block/fc1/kernel"));
  CHECK(tj::matches_pattern("*emb*", "lm/embed/embeddings"));
  CHECK_FALSE(tj::matches_pattern("embed/*", "embedding"));
  CHECK_FALSE(tj::matches_pattern("fc?/kernel", "fc12/kernel"));
  CHECK_FALSE(tj::matches_pattern("embed", "embed/embeddings"));
}

TEST_CASE("an async embedding rule on one tower is the sync step bitwise", "[towers][strategy][sparse]") {
  for (const int64_t vocab : {1, 7, 127}) {
    Run plain = rules_run(tj::Towers{tj::cpu(0)}, vocab);
    Run ruled = rules_run(tj::Towers{tj::cpu(0)}.with(tj::variables("embed/*"), tj::AsyncApply{}), vocab);
    for (int step = 0; step < 5; ++step) {
      const tj::HostFeeds batch = sparse_tower_batch(7, vocab, 20 + step);
      CHECK(plain.trainer->step(batch).loss == ruled.trainer->step(batch).loss);
    }
    for (const auto& [name, t] : plain.trainer->variables()) {
      INFO(name << ", V = " << vocab);
      CHECK(t.f32 == ruled.trainer->variables().at(name).f32);
      CHECK(t.i32 == ruled.trainer->variables().at(name).i32);
    }
  }
}

TEST_CASE("an async embedding rule on two towers follows the sync reduction it stands for",
          "[towers][strategy][sparse]") {
  // With scale_gradient each tower applies g_i / 2: on an even split the sync average; without
  // it each applies g_i: the sync sum. The bias is averaged (or summed) on both paths alike.
  struct Case { tj::AsyncApply rule; tj::Reduction sync; };
  for (const Case& c : {Case{tj::AsyncApply{}, tj::SyncAverage{}},
                        Case{tj::AsyncApply{.scale_gradient = false}, tj::SyncSum{}}})
    for (const int64_t vocab : {1, 7, 127}) {
      Run sync = rules_run(two_towers().reduce(c.sync), vocab);
      Run ruled = rules_run(two_towers().reduce(c.sync).with(tj::variables("embed/*"), c.rule), vocab);
      const bool sum = std::holds_alternative<tj::SyncSum>(c.sync);
      for (int step = 0; step < 4; ++step) {
        const tj::HostFeeds batch = sparse_tower_batch(8, vocab, 60 + step);  // 4 + 4
        ruled.trainer->restore(sync.trainer->variables(), sync.trainer->applies());
        const tj::HostVariables before = sync.trainer->variables();
        sync.trainer->step(batch);
        ruled.trainer->step(batch);
        // The sync path sums a row's terms t_p = (c_p + h_p) * w / (n_i 3 4) at once, the rule
        // tower by tower, each applied (two roundings of the weight more): within
        // lr 2 gamma(m + 6) S plus three roundings of each weight.
        const tj::HostTensor& table = before.at("embed/embeddings");
        const tj::HostTensor& bias = before.at("bias");
        const tj::HostTensor& ids = batch.at("ids");
        const tj::HostTensor& cs = batch.at("c");
        const tj::HostTensor& ws = sync.trainer->variables().at("embed/embeddings");
        const tj::HostTensor& wr = ruled.trainer->variables().at("embed/embeddings");
        const double scale = (sum ? 1.0 : 0.5) / (4 * kSparseReads * kSparseDim);
        for (int64_t row = 0; row < vocab; ++row)
          for (int64_t d = 0; d < kSparseDim; ++d) {
            const int64_t at = row * kSparseDim + d;
            int64_t reads = 0;
            double s = 0;
            for (int64_t p = 0; p < ids.size(); ++p)
              if (ids.i32[p] == row) {
                ++reads;
                s += std::abs(cs.f32[p * kSparseDim + d] + static_cast<double>(table.f32[at]) + bias.f32[d]) * scale;
              }
            const double bound = 0.5 * 2 * gamma(reads + 6) * s + 3 * u * (std::abs(ws.f32[at]) + std::abs(wr.f32[at]));
            INFO("V = " << vocab << ", step " << step << ", row " << row << " column " << d);
            REQUIRE(std::abs(static_cast<double>(wr.f32[at]) - ws.f32[at]) <= (reads ? bound : 0.0));
          }
        REQUIRE(ruled.trainer->variables().at("bias").f32 == sync.trainer->variables().at("bias").f32);
      }
    }
}

TEST_CASE("per-variable rules are checked when the trainer is built", "[towers][strategy][errors]") {
  using Catch::Contains;
  SECTION("a pattern that names no variable") {
    CHECK_THROWS_WITH(rules_run(two_towers().with(tj::variables("embedding/*"), tj::AsyncApply{}), 7),
                      Contains("variables(\"embedding/*\") names no trainable variable") &&
                          Contains("\"embed/embeddings\"") && Contains("fix the pattern") && Contains(here));
  }
  SECTION("a variable two rules name") {
    CHECK_THROWS_WITH(rules_run(two_towers()
                                    .with(tj::variables("embed/*"), tj::AsyncApply{})
                                    .with(tj::variables("*/embeddings"), tj::AsyncApply{}), 7),
                      Contains("variable \"embed/embeddings\" is named by two per-variable rules") &&
                          Contains("make the patterns disjoint") && Contains(here));
  }
  SECTION("an async rule on a large dense gradient") {
    // A [65536, 4] table with sparse = false: a 1 MiB dense gradient.
    CHECK_THROWS_WITH(rules_run(two_towers().with(tj::variables("embed/*"), tj::AsyncApply{}), 65536, false),
                      Contains("names \"embed/embeddings\", whose gradient is dense (f32[65536,4], 1024 KiB)") &&
                          Contains("apply by rule only sparse gradients") && Contains(here));
  }
  SECTION("a small dense gradient may follow a rule") {
    Run r = rules_run(two_towers().with(tj::variables("bias"), tj::AsyncApply{}), 7);
    CHECK(std::isfinite(r.trainer->step(sparse_tower_batch(6, 7, 1)).loss));
  }
  SECTION("a rule that is not AsyncApply") {
    CHECK_THROWS_WITH(two_towers().with(tj::variables("embed/*"), tj::SyncSum{}),
                      Contains("per-variable rules are built for AsyncApply") && Contains(here));
  }
  SECTION("rules on async towers") {
    CHECK_THROWS_WITH(rules_run(two_towers().reduce(tj::AsyncApply{}).with(tj::variables("embed/*"), tj::AsyncApply{}), 7),
                      Contains("no tower strategy trains") && Contains("per-variable rules"));
  }
}
