// Reductions split across blocks (EmittedKernel::launch; two passes, partials folded in split
// order) against the reference interpreter, at reduced extents on both sides of the split's
// thresholds: 16384 points (no split below), ceil(len / lanes) pieces, warp and block rows,
// columns, NCHW statistics per channel, sibling reductions and a side output stored once. On
// the emulated GPU (4 SMs) and on a real one the same kernels split at these sizes, at other
// counts. Then the same run twice gives the same bits.
#include <cstring>

#include "gpu_check.h"
#include "jit/reference/interpreter.h"
#include "tests/jit/graph_cases.h"
#include "tests/jit/op_cases.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

// The shapes' split at `batch` on this program's device, for messages.
std::string splits_of(const tj::CudaProgram& p, int64_t batch) {
  std::string s;
  for (const auto& k : p.module().kernels)
    if (k.is_reduction()) s += " " + k.symbol + ":" + std::to_string(k.launch(batch, p.device().sm_count()).splits);
  return s;
}

// Runs `fetches` on the GPU and through the reference at `batch`, within the error bounds;
// returns how many of the program's reductions split.
int check_at(const tj::Graph& g, const std::vector<Tensor>& fetches, const tj::reference::Feeds& feeds, int64_t batch,
             const std::string& what) {
  tj::reference::Variables vars;
  JitRun r = run_gpu_and_reference(g, fetches, feeds, vars);
  tj::CudaProgram p(g, fetches);
  int split = 0;
  for (const auto& k : p.module().kernels) split += k.is_reduction() && k.launch(batch, p.device().sm_count()).splits > 1;
  require_close(r, what + " at batch " + std::to_string(batch) + " (splits:" + splits_of(p, batch) + ")");
  return split;
}

}  // namespace

TEST_CASE("GPU: split reductions match the reference around their thresholds", "[gpu]") {
  // [B, 7]: 2340 rows are 16380 points (one pass), 2341 are 16387 (split); 4099 as the op cases.
  int split = 0;
  for (const char* name : {"sum all", "mean all", "logsumexp all", "sum batch keepdims", "mean batch", "max batch",
                           "logsumexp batch", "sibling column reductions"})
    for (const Case& c : op_cases())
      if (std::string(c.name) == name)
        for (int64_t batch : {1, 7, 127, 2340, 2341, 4099}) {
          tj::Graph g;
          tj::GraphScope use(g);
          auto x = tj::input("x", {kBatch, 7});
          auto y = c.y_batched ? tj::input("y", {kBatch, 7}) : tj::input("y", {7});
          tj::reference::Feeds feeds{{"x", random_array({batch, 7}, 1, c.lo, c.hi)},
                                 {"y", random_array(c.y_batched ? tj::Shape{batch, 7} : tj::Shape{7}, 2, c.lo, c.hi)}};
          split += check_at(g, {c.build(x, y)}, feeds, batch, name);
        }
  CHECK(split >= 8);  // every case splits at 2341 and 4099 on the emulator's 4 SMs
}

TEST_CASE("GPU: split warp rows, block rows and NCHW channel statistics match the reference", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto wide = tj::input("wide", {kBatch, 1000});   // a warp per row of 1000
  auto image = tj::input("image", {kBatch, 3, 7, 9});  // per channel over N, H, W (63 >= 32: rows)
  auto mean = tj::mean(image, {0, 2, 3}, true);
  auto centred = image - mean;
  auto var = tj::mean(centred * centred, {0, 2, 3});
  auto scaled = wide * 3 + 1;  // fetched too: stored by the reduction kernel's loop (side output) where fused
  std::vector<Tensor> fetches{tj::sum(wide, {1}), tj::max(scaled, {1}), scaled, tj::sum(wide), mean, var,
                              tj::logsumexp(image, {0, 2, 3})};
  int split = 0;
  // 17 rows of 1000: 17000 points on 3 blocks of warps (split); 16: 16000 (not). Images: 127
  // and 261 are 24003 and 49329 points over 3 channels (split), 7 is 441 (not).
  for (int64_t batch : {1, 7, 16, 17, 127, 261}) {
    tj::reference::Feeds feeds{{"wide", random_array({batch, 1000}, 3, -2, 2)}, {"image", random_array({batch, 3, 7, 9}, 4, -2, 2)}};
    split += check_at(g, fetches, feeds, batch, "rows and channels");
  }
  CHECK(split >= 4);
}

TEST_CASE("GPU: a split reduction gives the same bits run after run", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 7});
  auto image = tj::input("image", {kBatch, 3, 4, 8});
  std::vector<Tensor> fetches{tj::sum(x, {0}), tj::mean(x * x), tj::logsumexp(x, {0}), tj::mean(image, {0, 2, 3})};
  const int64_t batch = 2341;  // 16387 points of x, 224736 of image: every reduction splits
  tj::HostFeeds feeds{{"x", to_host(random_array({batch, 7}, 5, -3, 3))},
                      {"image", to_host(random_array({batch, 3, 4, 8}, 6, -3, 3))}};
  tj::HostVariables none;
  tj::CudaProgram p(g, fetches);
  int split = 0;
  for (const auto& k : p.module().kernels) split += k.is_reduction() && k.launch(batch, p.device().sm_count()).splits > 1;
  CHECK(split >= 3);
  const auto first = p.run(feeds, none), second = p.run(feeds, none);
  tj::CudaProgram again(g, fetches);  // a program of its own: fresh workspace, same order
  const auto third = again.run(feeds, none);
  REQUIRE(first.size() == fetches.size());
  for (size_t i = 0; i < first.size(); ++i) {
    INFO("fetch " << i);
    const size_t bytes = first[i].f32.size() * sizeof(float);
    CHECK(std::memcmp(first[i].f32.data(), second[i].f32.data(), bytes) == 0);
    CHECK(std::memcmp(first[i].f32.data(), third[i].f32.data(), bytes) == 0);
  }
}

namespace {

// Runs `fetches` at the feeds' batch in a program of its own (made under the environment the
// caller set), then again on `again`'s inputs in the same program.
struct TwoRuns {
  std::vector<tj::HostTensor> first, second;
  int one_pass = 0, combine_kernels = 0;  // the program's reductions at that batch
};
TwoRuns run_twice(const tj::Graph& g, const std::vector<Tensor>& fetches, const tj::HostFeeds& feeds,
                  const tj::HostFeeds& again, int64_t batch) {
  tj::CudaProgram p(g, fetches);
  TwoRuns r;
  for (const auto& k : p.module().kernels) {
    if (!k.is_reduction()) continue;
    const tj::cuda::Launch l = k.launch(batch, p.device().sm_count());
    r.one_pass += l.one_pass;
    r.combine_kernels += l.combine_grid > 0;
  }
  tj::HostVariables none;
  r.first = p.run(feeds, none);
  r.second = p.run(again, none);
  return r;
}

}  // namespace

TEST_CASE("GPU: one-pass reductions give the two passes' bits, run after run, in any block order", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 7});
  auto image = tj::input("image", {kBatch, 3, 4, 8});
  auto wide = tj::input("wide", {kBatch, 1000});
  // Columns (two sibling sums, a log-sum-exp), block rows (per channel), warp rows (17 rows of
  // 1000, split on the emulator's 4 SMs), a full mean: all split at these batches.
  const std::vector<Tensor> fetches{tj::sum(x, {0}),  tj::sum(x * x, {0}),          tj::logsumexp(x, {0}),
                                    tj::mean(image, {0, 2, 3}), tj::sum(wide, {1}), tj::mean(x * 3)};
  for (const int64_t batch : {int64_t{17}, int64_t{2341}}) {
    INFO("batch " << batch);
    auto feeds_of = [&](uint64_t seed) {
      return tj::HostFeeds{{"x", to_host(random_array({batch, 7}, seed, -3, 3))},
                           {"image", to_host(random_array({batch, 3, 4, 8}, seed + 1, -3, 3))},
                           {"wide", to_host(random_array({batch, 1000}, seed + 2, -3, 3))}};
    };
    const tj::HostFeeds feeds = feeds_of(7), again = feeds_of(11);
    TwoRuns two_passes;
    {
      ScopedEnv off("TOWERJIT_ONE_PASS_REDUCTIONS", "off");
      two_passes = run_twice(g, fetches, feeds, again, batch);
    }
    CHECK(two_passes.one_pass == 0);
    CHECK(two_passes.combine_kernels >= (batch == 17 ? 1 : 3));  // at 17 the wide rows alone split
    // One pass: the same sums, and the ticket back at 0 for the second run (a ticket left at
    // its count would have no block fold the second run's partials).
    const TwoRuns one_pass = run_twice(g, fetches, feeds, again, batch);
    CHECK(one_pass.one_pass == two_passes.combine_kernels);
    CHECK(one_pass.combine_kernels == 0);
    check_same_bits(one_pass.first, two_passes.first);
    check_same_bits(one_pass.second, two_passes.second);
    // Blocks in a random order: the fold is the last block's to finish, whichever that is.
    for (const char* seed : {"random:1", "random:2", "random:3"}) {
      INFO("TOWERJIT_EMULATOR_SCHEDULE=" << seed);
      ScopedEnv schedule("TOWERJIT_EMULATOR_SCHEDULE", seed);
      const TwoRuns shuffled = run_twice(g, fetches, feeds, again, batch);
      check_same_bits(shuffled.first, two_passes.first);
      check_same_bits(shuffled.second, two_passes.second);
    }
  }
}
