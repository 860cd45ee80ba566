// Launch shapes of the CUDA emitter's kernels, from the emitter's own records (EmittedKernel::
// launch), on any machine: no GPU, no NVRTC. Every reduction over at least 64k points runs on
// at least as many blocks as the GPU has SMs, at the SM counts of the GPUs towerjit targets;
// the split rule's pieces cover the reduced points exactly; the CNN's and the ResNet's
// training steps (examples/models.h) keep their reductions on the whole GPU at batch 512.
#include <catch2/catch.hpp>

#include "examples/models.h"
#include "jit/cuda/cuda_emitter.h"
#include "jit/passes/pipeline.h"
#include "tests/jit/cpu_test_env.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using Scheme = tj::cuda::EmittedKernel::Scheme;

namespace {

constexpr int kSmCounts[] = {4, 80, 108, 132, 148};  // the emulator, V100, A100, H100/H200, B200

tj::cuda::CudaModule emit(const tj::Graph& g, const std::vector<Tensor>& fetches) {
  std::vector<int> ids;
  for (const Tensor& t : fetches) ids.push_back(t.id());
  const tj::LoweredProgram lowered = tj::lower_graph(g, ids, {});
  return tj::cuda::emit_cuda_module(lowered.graph, lowered.program, "launch_test");
}

// What every reduction's launch must satisfy at `batch` on `sms` SMs.
void check_launch(const tj::cuda::EmittedKernel& k, int64_t batch, int sms) {
  const tj::cuda::Launch l = k.launch(batch, sms);
  const int64_t points = k.points.at(batch), len = k.reduced.at(batch), outputs = k.outputs.at(batch);
  INFO(k.symbol << " at B=" << batch << " on " << sms << " SMs: " << points << " points, " << outputs
                << " outputs of " << len << "; splits " << l.splits << " of " << l.chunk << ", grid " << l.grid);
  CHECK(l.grid >= 1);
  CHECK(l.grid <= 32 * sms);
  if (points >= 65536) CHECK(l.grid >= sms);
  CHECK(l.splits >= 1);
  CHECK(l.chunk >= 1);
  CHECK(l.splits * l.chunk >= len);       // the pieces cover the reduced points...
  CHECK((l.splits - 1) * l.chunk < std::max<int64_t>(len, 1));  // ...and none is empty
  if (l.splits > 1) {
    // The kernel's last block folds (one pass) where its warps' walks over the outputs'
    // partials take no more rounds of 4 loads than one combine warp's walk; else a combine kernel.
    const int64_t walk = (l.splits + 31) / 32, tail = (outputs + 7) / 8 * walk;
    CHECK(l.one_pass == ((tail + 3) / 4 <= (walk + 3) / 4));
    CHECK((l.combine_grid >= 1) == !l.one_pass);
    CHECK(l.partials_bytes == l.splits * outputs * k.partial_bytes);
    // A small reduction pays for a second launch only to cut a thread's walk of more than 8
    // points one after another (~0.5 us of DRAM latency every 4), and only down to 8.
    if (points < 16384) {
      const int64_t lanes = k.scheme == Scheme::row_per_warp ? 32 : k.scheme == Scheme::column ? k.block / 32 : k.block;
      CHECK((len + lanes - 1) / lanes > 8);
      CHECK((l.chunk + lanes - 1) / lanes <= 8);
    }
  } else {
    CHECK(l.combine_grid == 0);
    CHECK(!l.one_pass);
    CHECK(l.partials_bytes == 0);
    CHECK(l.chunk >= len);
  }
}

}  // namespace

TEST_CASE("CUDA launch: reductions over 64k points or more cover every SM, at odd sizes", "[cuda]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 7});           // columns over B, rows of 7, a full sum
  auto wide = tj::input("wide", {kBatch, 1000});  // warp rows
  auto long_rows = tj::input("long_rows", {kBatch, 5000});  // block rows
  auto image = tj::input("image", {kBatch, 3, 7, 9});       // NCHW statistics per channel
  auto fetches = std::vector<Tensor>{tj::sum(x, {0}), tj::sum(x * x, {1}), tj::logsumexp(x),
                                     tj::sum(wide, {1}), tj::max(long_rows, {1}), tj::mean(image, {0, 2, 3}),
                                     tj::logsumexp(x, {0}) - tj::mean(x * 2, {0})};
  const auto m = emit(g, fetches);
  int reductions = 0;
  for (const auto& k : m.kernels) {
    if (!k.is_reduction()) continue;
    ++reductions;
    REQUIRE(k.may_split());  // every loop space here is batch-sized
    CHECK(k.combine_symbol == k.symbol + "_combine");
    CHECK(m.source.find("void __launch_bounds__(256) " + k.combine_symbol + "(") != std::string::npos);
    for (int sms : kSmCounts)
      for (int64_t batch : {1, 7, 127, 2340, 2341, 4099, 9362, 9363, 65536, 65537, 1000003}) check_launch(k, batch, sms);
  }
  CHECK(reductions >= 6);
}

TEST_CASE("CUDA launch: the split is a function of the shape and the SM count alone", "[cuda]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 7});
  const auto m = emit(g, {tj::sum(x, {0})});
  REQUIRE(m.kernels.size() == 1);
  const auto& k = m.kernels[0];
  CHECK(k.scheme == Scheme::column);
  // Below 16384 points: one pass where each thread walks at most 8 rows (B = 64: 8 lanes of 8);
  // a longer walk splits only as far as 8 rows a thread, whatever the device: [2340, 7] walks
  // ceil(2340 / 8) = 293 rows, so 37 pieces of 64.
  CHECK(k.launch(64, 132).splits == 1);
  CHECK(k.launch(65, 132).splits == 2);
  for (int sms : {4, 132}) {
    const tj::cuda::Launch walk = k.launch(2340, sms);
    CHECK(walk.splits == 37);
    CHECK(walk.chunk == 64);
  }
  // [4099, 7] on the emulator's 4 SMs: one tile of 32 columns, so 64 pieces (two waves of 8
  // blocks per SM) of ceil(4099 / 64) = 65 rows.
  const tj::cuda::Launch emulated = k.launch(4099, 4);
  CHECK(emulated.splits == 64);
  CHECK(emulated.chunk == 65);
  CHECK(emulated.grid == 64);
  CHECK(emulated.one_pass);  // 7 outputs: folded by the last of the 64 blocks
  CHECK(emulated.combine_grid == 0);
  CHECK(emulated.partials_bytes == 64 * 7 * 4);
  // On 132 SMs: at most ceil(4099 / 8) pieces, so every slice has a row; recounted from the
  // chunk so no piece is empty.
  const tj::cuda::Launch h200 = k.launch(4099, 132);
  CHECK(h200.chunk == 8);
  CHECK(h200.splits == 513);
  CHECK(h200.grid == 513);
  // The same inputs, the same answer.
  CHECK(k.launch(4099, 132).chunk == h200.chunk);
  // TOWERJIT_ONE_PASS_REDUCTIONS=off: the same split, folded by a combine kernel of one block.
  tj::test::ScopedEnv two_passes("TOWERJIT_ONE_PASS_REDUCTIONS", "off");
  const tj::cuda::Launch two = k.launch(4099, 4);
  CHECK(!two.one_pass);
  CHECK(two.splits == 64);
  CHECK(two.combine_grid == 1);
}

TEST_CASE("CUDA launch: a fixed reduction under 16384 points never splits and has no combine kernel", "[cuda]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto small = tj::input("small", {127, 129});  // 16383 points
  auto large = tj::input("large", {128, 128});  // 16384
  const auto m = emit(g, {tj::sum(small, {0}), tj::sum(large, {0})});
  REQUIRE(m.kernels.size() == 2);
  for (const auto& k : m.kernels) {
    const bool fits = k.points.c < 16384;
    CHECK(k.may_split() == !fits);
    CHECK(k.combine_symbol.empty() == fits);
    for (int sms : kSmCounts) check_launch(k, 1, sms);
    CHECK((k.launch(1, 132).splits > 1) == !fits);  // 4 tiles of 32 columns, far from a wave
  }
  CHECK(m.source.find("_combine(") != std::string::npos);
}

TEST_CASE("CUDA launch: NCHW statistics per channel walk the contiguous H, W with a block per channel", "[cuda]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto image = tj::input("image", {kBatch, 16, 28, 28});
  const auto m = emit(g, {tj::mean(image, {0, 2, 3})});
  REQUIRE(m.kernels.size() == 1);
  const auto& k = m.kernels[0];
  CHECK(k.scheme == Scheme::row_per_block);
  const tj::cuda::Launch l = k.launch(512, 132);
  CHECK(l.grid >= 132);
  CHECK(l.splits == (2 * 8 * 132 + 15) / 16);  // two waves over 16 channels
  CHECK(m.source.find("partials[split * rows + row].acc = acc;") != std::string::npos);
}

TEST_CASE("CUDA launch: the CNN's and the ResNet's training steps keep every reduction on the whole GPU", "[cuda]") {
  for (const bool res : {false, true}) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto image = tj::input("image", {kBatch, 784});
    auto label = tj::input("label", {kBatch}, tj::DType::i32);
    auto logits = res ? examples::resnet(image) : examples::cnn(image);
    auto loss = tj::mean(tj::softmax_cross_entropy(logits, label));
    std::vector<Tensor> fetches{loss};
    for (const Tensor& gr : tj::grad(loss, tj::trainable_variables())) fetches.push_back(gr);
    const auto m = emit(g, fetches);
    int large = 0;
    for (const auto& k : m.kernels) {
      if (!k.is_reduction()) continue;
      for (int sms : kSmCounts) check_launch(k, 512, sms);
      if (k.points.at(512) >= 65536) ++large;
    }
    INFO((res ? "resnet" : "cnn"));
    CHECK(large >= (res ? 10 : 3));
  }
}
