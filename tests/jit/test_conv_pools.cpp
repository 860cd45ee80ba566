// Convolution pools (jit/passes/conv_pools.h): which 2x2 max pools the pass takes into the CPU
// convolution that makes their input, with their gradients routed by the winners' codes into
// the convolution's gradients and its bias gradient, and which it leaves; and the CPU's results
// with them (runtime/cpu/conv_epilogue.h, pool.h, conv_images.h) against the reference and bit
// for bit against the library routines (the bias gradient, summed in another order, within its
// bound), on every path (narrow, direct, im2col), at each vector level (tag [isa]), with ties,
// signed zeros and NaNs.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "epilogue_cases.h"
#include "jit/passes/half_matmuls.h"
#include "runtime/thread_pool.h"
#include "tests/jit/cpu_test_env.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

enum class Act { none, bias, bias_relu };

struct PoolCase {
  int64_t c, o, h, w;  // input channels, filters, the input's height and width
  int stride = 1, pad = 1;
  Act act = Act::bias_relu;
  std::string str() const {
    const char* a = act == Act::none ? "no epilogue" : act == Act::bias ? "bias" : "bias+relu";
    return std::to_string(c) + "->" + std::to_string(o) + " over " + std::to_string(h) + "x" + std::to_string(w) +
           ", stride " + std::to_string(stride) + ", pad " + std::to_string(pad) + ", " + a;
  }
};

// conv(x, w) (+ b, ReLU) -> 2x2 max pool -> a weighed sum: the pool, then the gradients of x,
// w (and b; with `fetch_dx`, then the pool's input's, which keeps the pool's gradient a step of
// its own). Feeds "x", "w", "b", "v" from `seed`; with `ties`, x and w are small integers, so
// many windows hold equal values (and ReLU's zeros), and x holds signed zeros and a NaN.
struct PoolGraph {
  std::vector<Tensor> fetches;
  tj::reference::Feeds feeds;
  int bias_grad = -1;  // the bias gradient's fetch, if any
};
PoolGraph pool_graph(const PoolCase& c, int64_t batch, uint32_t seed, bool ties, bool fetch_dx = false) {
  PoolGraph out;
  const Tensor x = tj::input("x", {kBatch, c.c, c.h, c.w}), w = tj::input("w", {c.o, c.c, 3, 3});
  Tensor y = tj::conv2d(x, w, {.stride = c.stride, .pad = c.pad});
  const Tensor b = tj::input("b", {c.o});
  if (c.act != Act::none) y = y + tj::reshape(b, {1, c.o, 1, 1});
  if (c.act == Act::bias_relu) y = tj::relu(y);
  const Tensor pool = tj::max_pool2d(y);
  const Tensor v = tj::input("v", pool.shape());
  std::vector<Tensor> wrt{x, w};
  if (c.act != Act::none) wrt.push_back(b);
  if (c.act != Act::none) out.bias_grad = 3;
  if (fetch_dx) wrt.push_back(y);
  out.fetches = tj::grad(tj::sum(pool * v), wrt);
  out.fetches.insert(out.fetches.begin(), pool);
  auto& f = out.feeds;
  f["x"] = random_array({batch, c.c, c.h, c.w}, seed);
  f["w"] = random_array({c.o, c.c, 3, 3}, seed + 1);
  f["b"] = random_array({c.o}, seed + 2);
  f["v"] = random_array(pool.shape().bind(batch), seed + 3);
  if (ties) {
    for (int64_t i = 0; i < f["x"].size(); ++i) f["x"][i] = std::round(2 * f["x"][i]);
    for (int64_t i = 0; i < f["w"].size(); ++i) f["w"][i] = std::round(f["w"][i]);
    f["x"][0] = -0.0;
    f["x"][f["x"].size() / 2] = std::numeric_limits<double>::quiet_NaN();
    for (int64_t i = 0; i < f["b"].size(); ++i) f["b"][i] = i % 2 ? 0.0 : -0.0;
  }
  return out;
}

// The pass's results against the library routines': the same bits, but for the bias gradient,
// which sums the same nonzero terms (dy where the winners are) in another order, so within
// that sum's bound, 2 (n - 1) u sum|dy| for n terms a channel (u = 2^-24).
void check_against_routines(const PoolGraph& pg, const std::vector<std::vector<float>>& fused,
                            const std::vector<std::vector<float>>& routines) {
  REQUIRE(fused.size() == routines.size());
  for (int i = 0; i < static_cast<int>(fused.size()); ++i) {
    INFO("output " << i);
    if (i != pg.bias_grad) {
      CHECK(tj::testing::same_bits(fused[i], routines[i]));
      continue;
    }
    const tj::reference::Array& v = pg.feeds.at("v");
    const int64_t channels = v.shape[1], n = v.size() / channels;
    double sum_abs = 0;
    for (double d : v.data) sum_abs += std::fabs(d);
    const double bound = 2.0 * static_cast<double>(n) * std::ldexp(1.0, -24) * sum_abs;
    REQUIRE(fused[i].size() == static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) CHECK(std::fabs(fused[i][c] - routines[i][c]) <= bound);
  }
}

std::vector<std::vector<float>> run_cpu(const tj::Graph& g, const PoolGraph& pg, tj::ThreadPool* pool) {
  tj::CpuProgram program(g, pg.fetches, false, pool);
  tj::HostFeeds hf;
  for (const auto& [name, a] : pg.feeds) hf[name] = to_host(a);
  tj::HostVariables hv;
  std::vector<std::vector<float>> out;
  for (const tj::HostTensor& t : program.run(hf, hv)) out.push_back(t.f32);
  return out;
}

// Even outputs; the narrow kernels (1 and 3 input channels), the direct ones (16), odd filter
// counts, a single pooled row and column, strided convolutions, each epilogue.
std::vector<PoolCase> pool_cases() {
  return {{1, 16, 28, 28}, {3, 7, 6, 10, 1, 1, Act::bias}, {1, 1, 2, 2, 1, 1, Act::none}, {16, 32, 14, 14},
          {16, 16, 4, 34, 1, 1, Act::bias}, {16, 7, 12, 8, 2, 1}, {3, 5, 10, 14, 1, 0}, {16, 17, 6, 6, 1, 1, Act::none}};
}

}  // namespace

TEST_CASE("convolution pools: a 2x2 pool is the convolution's, its gradient routed into its readers",
          "[jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const PoolGraph pg = pool_graph({3, 8, 6, 10}, 1, 1, false);
  const tj::kir::Program p = lower(g, pg.fetches);
  const tj::kir::Program off = [&] {
    tj::test::ScopedEnv knob("TOWERJIT_FUSED_MAX_POOLS", "off");
    return lower(g, pg.fetches);
  }();
  INFO("with the pass:\n" << tj::kir::to_string(p) << "\nwithout:\n" << tj::kir::to_string(off));
  CHECK(calls_of(off, tj::Op::MaxPool2D) == 1);
  CHECK(calls_of(off, tj::Op::MaxPool2DGrad) == 1);
  CHECK(calls_of(p, tj::Op::MaxPool2D) == 0);
  CHECK(calls_of(p, tj::Op::MaxPool2DGrad) == 0);  // in both gradients of the convolution
  int codes = -1, routed = 0;
  std::vector<int> bias_sum_reads;
  for (const tj::kir::Step& s : p.steps) {
    if (s.kind == tj::kir::Step::Kind::kernel) {
      // The bias gradient sums over the pooled points, dy where the pooled value is > 0 (where
      // the code is below 4).
      const tj::kir::Kernel& k = p.kernels[s.index];
      CHECK(k.space == tj::Shape{kBatch, 8, 3, 5});
      for (const tj::kir::Expr& e : k.exprs)
        if (e.kind == tj::kir::Expr::Kind::load) bias_sum_reads.push_back(k.accesses[e.access].buffer);
      continue;
    }
    const tj::kir::LibraryCall& c = p.calls[s.index];
    if (c.op == tj::Op::Conv2D) {
      REQUIRE(c.codes >= 0);
      codes = c.codes;
      CHECK(c.output == p.fetches[0]);  // the pool's buffer
      // A byte a window, four to an element: 8 * 3 * 5 windows an image.
      CHECK(p.buffers[c.codes].dtype == tj::DType::i32);
      CHECK(p.buffers[c.codes].shape == tj::Shape{kBatch, 30});
      CHECK(c.epilogue == tj::kir::Epilogue::bias_relu);
      CHECK(c.written() == std::vector<int>{c.output, c.codes});
    } else {  // the gradients: the pooled dy in dx's place, the codes last
      REQUIRE(c.inputs.size() == 3);
      CHECK(c.codes == codes);
      CHECK(c.inputs[2] == codes);
      CHECK(p.buffers[c.inputs[c.op == tj::Op::Conv2DGradInput ? 0 : 1]].name == "v");  // the pool's dy
      CHECK(c.attrs.relu_mask);
      ++routed;
    }
  }
  CHECK(routed == 2);
  CHECK(kernel_steps(p) == 1);
  REQUIRE(bias_sum_reads.size() == 2);
  CHECK(p.buffers[bias_sum_reads[0]].name == "v");  // the pool's dy
  CHECK(bias_sum_reads[1] == p.fetches[0]);        // the pooled values, for the ReLU's mask
  const std::string text = tj::kir::to_string(p);
  CHECK(text.find("(max pool 2x2, codes b") != std::string::npos);
  CHECK(text.find("(dy routed by codes b") != std::string::npos);
  // The GPU's programs keep their own pass (fused_max_pools.h): no convolution pools there.
  for (const tj::kir::LibraryCall& c : lower_for_gpu(g, pg.fetches).calls) CHECK(c.codes < 0);
}

TEST_CASE("convolution pools: pools the pass leaves to the library routine", "[jit][fusion]") {
  auto pools_left = [](const tj::Graph& g, const std::vector<Tensor>& fetches) {
    return calls_of(lower(g, fetches), tj::Op::MaxPool2D);
  };
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 3, 6, 10}), w = tj::input("w", {4, 3, 3, 3});
  const Tensor conv = tj::relu(tj::conv2d(x, w, {.pad = 1}));
  SECTION("an odd size: a row and a column outside every window") {
    const Tensor x2 = tj::input("x2", {kBatch, 3, 9, 11});  // a [B, 4, 7, 9] result
    CHECK(pools_left(g, {tj::max_pool2d(tj::conv2d(x2, w))}) == 1);
    CHECK(pools_left(g, {tj::max_pool2d(tj::conv2d(x, w))}) == 0);  // [B, 4, 4, 8]
  }
  SECTION("3x3 windows, and 2x2 windows at stride 1") {
    CHECK(pools_left(g, {tj::max_pool2d(conv, {.kernel = 3, .stride = 2, .pad = 1})}) == 1);
    CHECK(pools_left(g, {tj::max_pool2d(conv, {.kernel = 2, .stride = 1})}) == 1);
  }
  SECTION("the convolution's result fetched, or read by another op") {
    CHECK(pools_left(g, {tj::max_pool2d(conv), conv}) == 1);
    CHECK(pools_left(g, {tj::max_pool2d(conv), tj::sum(conv, {1})}) == 1);
  }
  SECTION("a max pool and an average pool of one result") {
    CHECK(pools_left(g, {tj::max_pool2d(conv) + tj::avg_pool2d(conv)}) == 1);
  }
  SECTION("a 16-bit convolution (the conv precision policy)") {
    tj::set_precision_policy({.conv_operands = tj::DType::bf16});
    const int left = pools_left(g, {tj::max_pool2d(conv)});
    tj::set_precision_policy({});
    CHECK(left == 1);
  }
  SECTION("the pool's gradient fetched: a step of its own, routed by the codes") {
    const Tensor y = tj::conv2d(x, w), pool = tj::max_pool2d(y);  // (no bias: the ReLU would be a kernel)
    const std::vector<Tensor> dy = tj::grad(tj::sum(pool * pool), {y});
    const tj::kir::Program p = lower(g, {pool, dy[0]});
    INFO(tj::kir::to_string(p));
    CHECK(calls_of(p, tj::Op::MaxPool2D) == 0);
    REQUIRE(calls_of(p, tj::Op::MaxPool2DGrad) == 1);
    CHECK(tj::kir::to_string(p).find("(routed by codes)") != std::string::npos);
  }
  SECTION("TOWERJIT_FUSED_MAX_POOLS=off") {
    tj::test::ScopedEnv off("TOWERJIT_FUSED_MAX_POOLS", "off");
    CHECK(pools_left(g, {tj::max_pool2d(conv)}) == 1);
  }
}

TEST_CASE("convolution pools match the reference and the library routines' bits on every path", "[cpu][jit][isa]") {
  tj::ThreadPool threads(2);
  uint32_t seed = 700;
  for (const PoolCase& c : pool_cases())
    for (int64_t batch : {1, 7})  // random values and dx fetched at batch 1, ties and a NaN at 7
      for (const char* direct : {"on", "off"}) {  // the direct and narrow kernels, then im2col + sgemm
          const bool ties = batch == 7;
          tj::test::ScopedEnv path("TOWERJIT_DIRECT_CONV", direct);
          const std::string what = c.str() + ", batch " + std::to_string(batch) + (ties ? ", ties and NaN" : "") +
                                   ", TOWERJIT_DIRECT_CONV=" + direct;
          INFO(what);
          tj::Graph g;
          tj::GraphScope use(g);
          const PoolGraph pg = pool_graph(c, batch, seed += 5, ties, /*fetch_dx=*/!ties);
          REQUIRE(calls_of(lower(g, pg.fetches), tj::Op::MaxPool2D) == 0);
          if (!ties) {  // (a NaN has no error bound to keep)
            tj::reference::Variables vars;
            require_close(run_both(g, pg.fetches, pg.feeds, vars, false, &threads), what);
          }
          // The routines' bits on one thread and on two (a NaN's sign may differ between the
          // two, as OpenBLAS's blocking does; not between the pass and the routines).
          const auto fused = run_cpu(g, pg, &threads), fused_one = run_cpu(g, pg, nullptr);
          tj::test::ScopedEnv off("TOWERJIT_FUSED_MAX_POOLS", "off");
          check_against_routines(pg, fused, run_cpu(g, pg, &threads));
          check_against_routines(pg, fused_one, run_cpu(g, pg, nullptr));
      }
}
