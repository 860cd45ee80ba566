// Per-channel reductions over N·H·W in NCHW (batch norm's statistics and its backward's sums)
// and the batch-norm chain around them, through the CPU JIT against the reference interpreter
// within its error bound, at odd channel and spatial sizes, on one thread and split over a
// pool; and bitwise the same whatever the pool.
#include <cmath>
#include <cstring>
#include <string>

#include "jit/cpu/llvm_emitter.h"
#include "jit/passes/coalesce_axes.h"
#include "jit/passes/pipeline.h"
#include "jit_check.h"
#include "runtime/thread_pool.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

std::string shape_text(int64_t b, int64_t c, int64_t h, int64_t w) {
  return "[" + std::to_string(b) + "," + std::to_string(c) + "," + std::to_string(h) + "," + std::to_string(w) + "]";
}

// sum, mean and max over axes 0, 2, 3 (keepdims, as batch norm takes them), and the sibling
// sums of a backward (sum(g), sum(g * x)) in one graph.
void channel_reductions(int64_t b, int64_t c, int64_t h, int64_t w, tj::ThreadPool* pool) {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, c, h, w});
  auto dy = tj::input("dy", {kBatch, c, h, w});
  auto s = tj::sum(x, {0, 2, 3}, true);
  auto m = tj::mean(x, {0, 2, 3}, true);
  auto mx = tj::max(x, {0, 2, 3}, true);
  auto centred = x - m;
  auto var = tj::mean(centred * centred, {0, 2, 3}, true);
  auto sg = tj::sum(dy, {0, 2, 3});
  auto sgx = tj::sum(dy * centred, {0, 2, 3});
  tj::reference::Variables vars;
  auto r = run_both(g, {s, m, mx, var, sg, sgx},
                    {{"x", random_array({b, c, h, w}, 11, -2, 3)}, {"dy", random_array({b, c, h, w}, 12)}},
                    vars, false, pool);
  require_close(r, "per-channel reductions of " + shape_text(b, c, h, w) + (pool ? " on a pool" : ""));
}

// relu(batch_norm(x) + x) (training: batch statistics, moving averages updated), its loss
// against random weights, and the gradients of x, gamma and beta.
tj::Graph batch_norm_step(int64_t c, int64_t h, int64_t w, std::vector<Tensor>* fetches) {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, c, h, w});
  auto wt = tj::input("w", {kBatch, c, h, w});
  auto y = tj::relu(tj::batch_norm(x, /*training=*/true, "bn", {.axis = 1}) + x);
  auto loss = tj::sum(y * wt);
  std::vector<Tensor> wrt = tj::trainable_variables();
  wrt.push_back(x);
  auto grads = tj::grad(loss, wrt);
  *fetches = {loss, y};
  fetches->insert(fetches->end(), grads.begin(), grads.end());
  return g;
}

tj::reference::Feeds batch_norm_feeds(int64_t b, int64_t c, int64_t h, int64_t w) {
  return {{"x", random_array({b, c, h, w}, 21, -1, 2)}, {"w", random_array({b, c, h, w}, 22)}};
}

void batch_norm_matches(int64_t b, int64_t c, int64_t h, int64_t w, tj::ThreadPool* pool) {
  std::vector<Tensor> fetches;
  tj::Graph g = batch_norm_step(c, h, w, &fetches);
  tj::reference::Variables vars = tj::reference::initialize_variables(g, 5);
  auto r = run_both(g, fetches, batch_norm_feeds(b, c, h, w), vars, /*updates=*/true, pool);
  require_close(r, "batch norm step of " + shape_text(b, c, h, w) + (pool ? " on a pool" : ""));
}

bool bitwise_equal(const std::vector<tj::HostTensor>& a, const std::vector<tj::HostTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].shape != b[i].shape || std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4) != 0) return false;
  return true;
}

}  // namespace

TEST_CASE("per-channel reductions over N H and W match the reference at odd sizes", "[cpu][jit][isa][channel]") {
  tj::ThreadPool pool(2);
  for (int64_t c : {1, 7, 127})
    for (auto [h, w] : {std::pair<int64_t, int64_t>{1, 1}, {7, 7}, {1, 127}, {127, 1}, {7, 13}})
      for (int64_t b : {1, 7}) {
        channel_reductions(b, c, h, w, nullptr);
        channel_reductions(b, c, h, w, &pool);
      }
  channel_reductions(9, 7, 23, 29, &pool);  // past the pool's threshold: split by channel
  channel_reductions(3, 127, 11, 13, &pool);
}

TEST_CASE("batch norm forward and backward with a residual ReLU match the reference at odd sizes", "[cpu][jit][isa][channel]") {
  tj::ThreadPool pool(2);
  for (int64_t c : {1, 7, 127})
    for (auto [h, w] : {std::pair<int64_t, int64_t>{1, 1}, {7, 7}, {1, 127}})
      for (int64_t b : {1, 7}) {
        if (b == 1 && h == 1 && w == 1) continue;  // one value a channel: the variance is 0
        batch_norm_matches(b, c, h, w, nullptr);
        batch_norm_matches(b, c, h, w, &pool);
      }
  batch_norm_matches(9, 7, 23, 29, &pool);
}

TEST_CASE("batch norm steps are bitwise the same run to run and on 1 2 or 3 threads", "[cpu][jit][channel]") {
  std::vector<Tensor> fetches;
  tj::Graph g = batch_norm_step(7, 23, 29, &fetches);
  tj::HostFeeds feeds;
  for (const auto& [name, a] : batch_norm_feeds(9, 7, 23, 29)) feeds[name] = to_host(a);
  tj::HostVariables initial;
  for (const auto& [name, a] : tj::reference::initialize_variables(g, 5)) initial[name] = to_host(a);
  auto run = [&](tj::ThreadPool* pool) {
    tj::CpuProgram program(g, fetches, /*run_update_ops=*/true, pool);
    tj::HostVariables vars = initial;
    std::vector<tj::HostTensor> out;
    for (int step = 0; step < 2; ++step) out = program.run(feeds, vars, step);
    for (const auto& [name, v] : vars) out.push_back(v);
    return out;
  };
  tj::ThreadPool two(2), three(3);
  const auto alone = run(nullptr);
  CHECK(bitwise_equal(alone, run(nullptr)));
  CHECK(bitwise_equal(alone, run(&two)));
  CHECK(bitwise_equal(alone, run(&three)));
}

TEST_CASE("the CPU emitter merges H and W of a per-channel statistic into one contiguous loop", "[cpu][jit][fusion][channel]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 16, 28, 28});
  auto m = tj::mean(x, {0, 2, 3}, true);
  auto lowered = tj::lower_graph(g, {m.id()}, {});
  REQUIRE(lowered.program.kernels.size() == 1);
  const tj::kir::Kernel k = tj::coalesce_axes(lowered.program.kernels[0]);
  CHECK(k.space.str() == "[B,16,784]");
  CHECK(k.reduce_axes == std::vector<int>{0, 2});
  std::vector<tj::cpujit::EmittedKernel> emitted;
  const std::string ir = tj::cpujit::emit_llvm_module(lowered.program, &emitted);
  REQUIRE(emitted.size() == 1);
  CHECK(emitted[0].space.str() == "[B,16,784]");
  CHECK(emitted[0].split_axis == 1);  // threads own channels
  CHECK(ir.find("loop over [B,16,784]") != std::string::npos);
  // An axis that is reduced next to one that is not stays apart; a strided access stops a merge.
  auto t = tj::transpose(x, {0, 1, 3, 2});
  auto s = tj::sum(t, {0, 2, 3}, true);
  auto l2 = tj::lower_graph(g, {s.id()}, {});
  const tj::kir::Kernel k2 = tj::coalesce_axes(l2.program.kernels.back());
  CHECK(k2.space.str() == "[B,16,28,28]");
}

// Batch norm's statistics take one pass over x, shifted by each channel's first element
// (dsl/layers.cpp, batch_moments). Against the closed form in double, from the same floats:
// values far from zero (mean 1000, spread 3), where mean(x^2) - mean(x)^2 unshifted loses most
// digits of the variance (10^6 / 3 of its ulps, some 0.02 relative at these sizes), and the
// same with an outlier as each channel's first element, the shift's bad case. The bound is
// recursive summation's, n ulps of the terms' sum (Higham, Accuracy and Stability, 4.2): mean(d^2)
// within n u mean(d^2), mean(d)^2 within 2 n u mean(d^2); the differences d = x - s are exact
// (Sterbenz: x and s within a factor of 2), and a few roundings more for the divisions.
TEST_CASE("batch norm's one-pass statistics hold values far from zero to float error", "[cpu][jit][channel]") {
  const int64_t b = 7, c = 3, h = 7, w = 5, n = b * h * w;
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, c, h, w});
  const Tensor y = tj::batch_norm(x, /*training=*/true, "bn", {.momentum = 0.0});
  tj::ThreadPool pool(2);
  const double u = std::ldexp(1.0, -24);
  for (const double outlier : {0.0, 20.0}) {
    tj::reference::Array xs = random_array({b, c, h, w}, 31, 997, 1003);
    for (int64_t ch = 0; ch < c; ++ch) xs[ch * h * w] = static_cast<float>(xs[ch * h * w] + outlier);
    for (tj::ThreadPool* threads : {static_cast<tj::ThreadPool*>(nullptr), &pool}) {
      tj::HostVariables vars;
      for (const auto& [name, a] : tj::reference::initialize_variables(g, 3)) vars[name] = to_host(a);
      tj::CpuProgram program(g, {y}, /*run_update_ops=*/true, threads);
      program.run({{"x", to_host(xs)}}, vars, 0);
      for (int64_t ch = 0; ch < c; ++ch) {
        const double s = xs[ch * h * w];
        double sum = 0;
        for (int64_t i = 0; i < b; ++i)
          for (int64_t p = 0; p < h * w; ++p) sum += xs[(i * c + ch) * h * w + p];
        const double mean = sum / n;
        double squares = 0, shifted_squares = 0;
        for (int64_t i = 0; i < b; ++i)
          for (int64_t p = 0; p < h * w; ++p) {
            const double v = xs[(i * c + ch) * h * w + p];
            squares += (v - mean) * (v - mean), shifted_squares += (v - s) * (v - s);
          }
        const double variance = squares / n, shifted = shifted_squares / n;
        const double bound = (3.0 * n + 8) * u * shifted + 8 * u * variance;
        INFO("outlier " << outlier << ", channel " << ch << (threads ? ", on the pool" : ", one thread"));
        REQUIRE(bound < 0.01 * variance);  // these sizes can tell the shift from none
        CHECK(std::abs(vars.at("bn/moving_mean").f32[ch] - mean) <= 4 * u * std::abs(mean) + n * u * std::sqrt(shifted));
        // momentum 0: the moving variance is the batch's, unbiased (times n / (n - 1)).
        const double biased = vars.at("bn/moving_variance").f32[ch] * (n - 1.0) / n;
        CHECK(std::abs(biased - variance) <= bound);
      }
    }
  }
}
