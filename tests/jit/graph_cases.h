// Graphs every backend must run as the reference interpreter does: the one-op table of
// op_cases.h, integer labels, convolutions and pools with their gradients, random numbers at
// two steps, update ops, NaN through relu, Adam's bias corrections, pow's gradient at 0, a
// momentum step writing its variables in place.
// Each case builds its graphs, runs them on the backend the test passes (the CPU JIT in
// tests/jit/test_cpu_ops.cpp, a GPU in tests_gpu/test_gpu_ops.cpp) and compares; `where`
// names the backend in messages.
#pragma once

#include <cmath>
#include <functional>
#include <string>

#include "jit/reference/interpreter.h"
#include "jit_check.h"
#include "op_cases.h"
#include "towerjit.h"

namespace towerjit::testing::cases {

// Runs `fetches` on a backend and through the reference, with the update ops when `updates`,
// random numbers keyed by `step`.
using Runner = std::function<JitRun(const Graph&, const std::vector<Tensor>&, const reference::Feeds&,
                                    reference::Variables&, bool updates, uint64_t step)>;

// One row of op_cases.h's table at `batch` examples.
inline void one_op(const Runner& run, const Case& c, int64_t batch, const std::string& where) {
  Graph g;
  GraphScope use(g);
  auto x = input("x", {kBatch, 7});
  auto y = c.y_batched ? input("y", {kBatch, 7}) : input("y", {7});
  auto out = c.build(x, y);
  reference::Feeds feeds{{"x", random_array({batch, 7}, 1, c.lo, c.hi)},
                         {"y", random_array(c.y_batched ? Shape{batch, 7} : Shape{7}, 2, c.lo, c.hi)}};
  reference::Variables vars;
  require_close(run(g, {out}, feeds, vars, false, 0), std::string(c.name) + " at batch " + std::to_string(batch) + where);
}

inline void cross_entropy_and_one_hot(const Runner& run, const std::string& where) {
  Graph g;
  GraphScope use(g);
  auto logits = input("logits", {kBatch, 10});
  auto labels = input("labels", {kBatch}, DType::i32);
  auto loss = mean(softmax_cross_entropy(logits, labels));
  for (int64_t batch : {1, 7, 127}) {
    reference::Array l({batch}, DType::i32);
    for (int64_t i = 0; i < batch; ++i) l[i] = (i * 7) % 10;
    reference::Variables vars;
    auto r = run(g, {loss, one_hot(labels, 10)}, {{"logits", random_array({batch, 10}, 3, -4, 4)}, {"labels", l}},
                 vars, false, 0);
    require_close(r, "cross entropy at batch " + std::to_string(batch) + where);
  }
}

inline void convolutions_and_pools(const Runner& run, const std::string& where) {
  Graph g;
  GraphScope use(g);
  auto x = input("x", {kBatch, 3, 7, 9});
  auto w = input("w", {5, 3, 3, 3});
  auto conv = conv2d(x, w, {.stride = 2, .pad = 1});
  auto maxp = max_pool2d(x, {.kernel = 3, .stride = 2, .pad = 1});
  auto avgp = avg_pool2d(x, {.kernel = 2});
  // The 2x2 / stride 2 max pool has its own paths: an odd size (7x9) leaves a row and a column
  // outside every window, an even one (6x8) none.
  auto even = input("even", {kBatch, 2, 6, 8});
  auto max2 = max_pool2d(x), max2_even = max_pool2d(even);
  auto loss = sum(conv * conv) + sum(maxp * maxp) + sum(avgp * avgp * avgp) + sum(max2 * max2) +
              sum(max2_even * max2_even);
  auto grads = grad(loss, {x, w, even});
  for (int64_t batch : {1, 2, 5}) {
    reference::Variables vars;
    auto r = run(g, {conv, maxp, avgp, max2, max2_even, grads[0], grads[1], grads[2]},
                 {{"x", random_array({batch, 3, 7, 9}, 4)}, {"w", random_array({5, 3, 3, 3}, 5)},
                  {"even", random_array({batch, 2, 6, 8}, 6)}},
                 vars, false, 0);
    require_close(r, "conv/pool at batch " + std::to_string(batch) + where);
  }
}

inline void random_uniform_steps(const Runner& run, const std::string& where) {
  Graph g;
  GraphScope use(g);
  auto x = input("x", {kBatch, 7});
  auto u = random_uniform_like(x, 42);
  for (uint64_t step : {0ull, 3ull}) {
    reference::Variables vars;
    auto r = run(g, {u}, {{"x", random_array({5, 7}, 6)}}, vars, false, step);
    require_close(r, "random_uniform at step " + std::to_string(step) + where);
  }
}

// Dropout's mask is drawn again by each kernel that reads it (jit/passes/fusion_plan.cpp: random
// numbers read no memory): the forward's product over [B, 24], the backward's through a reshape
// to [B, 2, 3, 4], and a sum over each row. Every draw must be the reference's mask, at the
// step given, whichever loop space draws it.
inline void dropout_drawn_by_each_reader(const Runner& run, const std::string& where) {
  Graph g;
  GraphScope use(g);
  auto x = input("x", {kBatch, 2, 3, 4});
  auto w = input("w", {kBatch, 2, 3, 4});
  auto d = dropout(reshape(x, {kBatch, 24}), 0.5, /*training=*/true, 7);
  auto y = reshape(d, {kBatch, 2, 3, 4}) * w;
  auto rows = sum(d * d, {1});
  auto dx = grad(sum(y) + sum(rows), {x})[0];
  for (int64_t batch : {1, 7})
    for (uint64_t step : {0ull, 5ull}) {
      reference::Variables vars;
      reference::Feeds feeds{{"x", random_array({batch, 2, 3, 4}, 11, 0.5, 2)},
                             {"w", random_array({batch, 2, 3, 4}, 12)}};
      require_close(run(g, {dx, rows}, feeds, vars, false, step),
                    "dropout at batch " + std::to_string(batch) + ", step " + std::to_string(step) + where);
    }
}

// Max pools after a ReLU, whose mask the pool gradient takes in (jit/passes/mask_pool_grads.h):
// 2x2 / stride 2 at an odd and an even size, and overlapping 3x3 / stride 2 windows with padding
// (a point the first maximum of several windows). Integer inputs put ties in the windows and
// zeros before and after the ReLU; `shift` moves them off zero.
inline void relu_then_pools(const Runner& run, const std::string& where) {
  for (double shift : {0.0, 0.25}) {
    Graph g;
    GraphScope use(g);
    auto x = input("x", {kBatch, 3, 7, 9});
    auto even = input("even", {kBatch, 2, 6, 8});
    auto r = relu(x + shift), r_even = relu(even + shift);
    auto a = max_pool2d(r), b = max_pool2d(r_even), c = max_pool2d(r, {.kernel = 3, .stride = 2, .pad = 1});
    auto w = input("w", a.shape()), w_even = input("w_even", b.shape()), w_c = input("w_c", c.shape());
    auto loss = sum(a * w) + sum(b * w_even) + sum(c * c * w_c);
    auto grads = grad(loss, {x, even});
    for (int64_t batch : {1, 2, 5}) {
      auto integers = [](Shape s, uint32_t seed) {
        reference::Array v = random_array(s, seed, -2.5, 2.5);
        for (double& e : v.data) e = std::round(e);
        return v;
      };
      reference::Variables vars;
      auto out = run(g, {a, b, c, grads[0], grads[1]},
                     {{"x", integers({batch, 3, 7, 9}, 11)}, {"even", integers({batch, 2, 6, 8}, 12)},
                      {"w", random_array(a.shape().bind(batch), 13)},
                      {"w_even", random_array(b.shape().bind(batch), 14)},
                      {"w_c", random_array(c.shape().bind(batch), 15)}},
                     vars, false, 0);
      require_close(out, "relu then pools, shift " + std::to_string(shift) + ", batch " + std::to_string(batch) +
                             where);
    }
  }
}

// 2x2 / stride-2 max pools whose input an elementwise kernel makes and nothing else reads: the
// GPU computes them in that kernel and routes their gradients by each window's winner
// (jit/passes/fused_max_pools.h). After relu(x * s + r), whose mask the pool gradient takes in,
// and after x * s - r, whose negative maxima route too; both gradients reach x's (elementwise)
// and s's (a sum per channel). Integer inputs put ties in the windows, of positive values and of
// the ReLU's zeros; -x's, computed exactly, leave the reference no room: its ties go to the first.
// A NaN in r wins its window in each image. A dropout's mask is drawn at each window point by
// its index in the unpooled input. One window an image (2x2), and 6x10.
inline void max_pools_in_their_producers(const Runner& run, const std::string& where) {
  for (const int64_t h : {2, 6}) {
    const int64_t w = h == 2 ? 2 : 10;
    Graph g;
    GraphScope use(g);
    auto x = input("x", {kBatch, 3, h, w});
    auto r = input("r", {kBatch, 3, h, w});
    auto s = input("s", {1, 3, 1, 1});
    auto masked = max_pool2d(relu(x * s + r)), plain = max_pool2d(x * s - r), negated = max_pool2d(-x);
    auto dropped = max_pool2d(dropout(x * s, 0.5, /*training=*/true, 9));
    auto w_masked = input("w_masked", masked.shape()), w_plain = input("w_plain", plain.shape());
    auto grads = grad(sum(masked * w_masked) + sum(plain * w_plain) + sum(negated * w_plain) + sum(dropped * w_masked),
                      {x, s});
    for (int64_t batch : {1, 7}) {
      auto integers = [](Shape shape, uint32_t seed) {
        reference::Array v = random_array(shape, seed, -2.5, 2.5);
        for (double& e : v.data) e = std::round(e);
        return v;
      };
      reference::Array r_values = integers({batch, 3, h, w}, 22), s_values({1, 3, 1, 1});
      s_values.data = {1, 2, 1};  // integer products: ties between positive values too
      for (int64_t b = 0; b < batch; ++b) r_values.data[b * 3 * h * w + 1] = std::nan("");
      reference::Variables vars;
      auto out = run(g, {masked, plain, negated, dropped, grads[0], grads[1]},
                     {{"x", integers({batch, 3, h, w}, 21)}, {"r", r_values}, {"s", s_values},
                      {"w_masked", random_array(masked.shape().bind(batch), 24)},
                      {"w_plain", random_array(plain.shape().bind(batch), 25)}},
                     vars, false, 0);
      require_close(out, "max pools in their producers, " + std::to_string(h) + "x" + std::to_string(w) + ", batch " +
                             std::to_string(batch) + where);
    }
  }
}

inline void batch_norm_updates(const Runner& run, const std::string& where) {
  Graph g;
  GraphScope use(g);
  auto x = input("x", {kBatch, 4});
  auto y = batch_norm(x, /*training=*/true, "bn", {.axis = 1});
  auto loss = sum(y * y);
  reference::Variables vars = reference::initialize_variables(g, 3);
  auto r = run(g, {loss, y}, {{"x", random_array({9, 4}, 7)}}, vars, /*updates=*/true, 0);
  require_close(r, "batch_norm with moving-average updates" + where);
}

// A NaN reaching relu stays NaN, as in PyTorch, so a damaged input shows in the loss; its
// gradient there is 0, as PyTorch's (the mask is y > 0).
inline void relu_keeps_nan(const Runner& run, const std::string& where) {
  Graph g;
  GraphScope use(g);
  auto x = input("x", {kBatch, 3});
  auto y = relu(x);
  auto loss = mean(y);
  auto dx = grad(loss, {x})[0];
  reference::Array xs({2, 3});
  xs.data = {std::nan(""), -1, 2, 0.5, std::nan(""), -3};
  reference::Variables vars;
  const JitRun r = run(g, {y, loss, dx}, {{"x", xs}}, vars, false, 0);
  for (const auto* side : {&r.jit, &r.ref}) {
    INFO((side == &r.jit ? "backend" : "reference") << where);
    const auto& out = *side;
    CHECK(std::isnan(out[0][0]));
    CHECK(out[0][1] == 0);
    CHECK(out[0][2] == 2);
    CHECK(out[0][3] == 0.5);
    CHECK(std::isnan(out[0][4]));
    CHECK(out[0][5] == 0);
    CHECK(std::isnan(out[1][0]));  // the loss
    CHECK(out[2][0] == 0);          // the gradient at a NaN
    CHECK(out[2][2] == Approx(1.0 / 6));
  }
}

// Adam's bias corrections 1 - beta^t (detail::one_minus_power) for t = 1..3000 and a few large
// t, against -expm1(t log beta) in long double (good to ~2^-62). Bound, in units u of the
// side's unit roundoff (2^-24 on an f32 backend, 2^-53 in the reference): log(beta) rounded, u;
// t * c, u, which 1 - e^x passes on undamped (its condition number is below 1 for x < 0); tanh
// within 2 ulps (glibc, CUDA), 4u; exp within 2 ulps, 4u, of which e^x / (e^x + 1) <= 1/2
// reaches the sum; the add and the multiply, u each: 10u in all. The plain 1 - pow(beta, t)
// in f32 was off by up to 330u at beta 0.999 and 3600u at 0.9999.
inline void bias_corrections(const Runner& run, const std::string& where) {
  Graph g;
  GraphScope use(g);
  auto t = input("t", {kBatch});
  const double betas[] = {0.0, 1e-3, 0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999};
  std::vector<Tensor> fetches;
  for (double beta : betas) fetches.push_back(detail::one_minus_power(beta, t));
  std::vector<double> ts;
  for (int i = 1; i <= 3000; ++i) ts.push_back(i);
  for (double big : {1e4, 3e4, 1e5, 1e6, 16777215.0}) ts.push_back(big);  // f32-exact counts
  reference::Array tv({static_cast<int64_t>(ts.size())});
  tv.data = ts;
  reference::Variables vars;
  const JitRun r = run(g, fetches, {{"t", tv}}, vars, false, 0);
  for (const auto* side : {&r.jit, &r.ref}) {
    const bool backend = side == &r.jit;
    const double u = backend ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
    for (size_t k = 0; k < std::size(betas); ++k) {
      const long double c = betas[k] >= 0.5 ? std::log1p(static_cast<long double>(betas[k]) - 1)
                                            : std::log(static_cast<long double>(betas[k]));
      double worst = 0;
      size_t at = 0;
      for (size_t i = 0; i < ts.size(); ++i) {
        const long double exact = -std::expm1(static_cast<long double>(ts[i]) * c);
        const double err = static_cast<double>(std::abs((*side)[k][i] - exact) / exact);
        if (!(err <= worst)) worst = err, at = i;
      }
      INFO((backend ? "backend" : "reference") << where << ": 1 - " << betas[k] << "^t, worst at t = "
                                                << ts[at] << ": " << worst / u << " u");
      CHECK(worst <= 10 * u);
    }
  }
}

// pow's gradients where a = 0 or b = 0 are PyTorch's (pow_backward_self: 0 where b = 0;
// pow_backward_exponent: 0 where a = 0 and b >= 0), not 0 * inf = NaN or y log 0 = -inf.
// Per element (a, b, upstream g) and the expected (d/da, d/db):
//   (0, 0, 1.5): (0, 0)       (0, 2, -2): (0, 0)       (0, 0.5, 0.25): (inf, 0)
//   (2, 0, 3): (0, 3 ln 2)    (0, -1, 2): (-inf, -inf: 2 * 0^-1 log 0, unmasked as b < 0)
//   (3, 1.5, 1): (1.5 sqrt 3, 3^1.5 ln 3), an ordinary point.
// The finite values are within 12 f32 roundings u: pow within 4 ulps (CUDA's bound; 8u), log
// within 1 ulp (2u), two products.
inline void pow_gradient_at_zero(const Runner& run, const std::string& where) {
  Graph g;
  GraphScope use(g);
  auto a = input("a", {kBatch}), b = input("b", {kBatch}), up = input("g", {kBatch});
  auto y = pow(a, b);
  auto grads = grad(sum(y * up), {a, b});
  reference::Array av({6}), bv({6}), gv({6});
  av.data = {0, 0, 0, 2, 0, 3};
  bv.data = {0, 2, 0.5, 0, -1, 1.5};
  gv.data = {1.5, -2, 0.25, 3, 2, 1};
  const double inf = INFINITY;
  const std::vector<double> da = {0, 0, inf, 0, -inf, 1.5 * std::sqrt(3.0)};
  const std::vector<double> db = {0, 0, 0, 3 * std::log(2.0), -inf, std::pow(3.0, 1.5) * std::log(3.0)};
  reference::Variables vars;
  const JitRun r = run(g, {grads[0], grads[1]}, {{"a", av}, {"b", bv}, {"g", gv}}, vars, false, 0);
  const double tol = 12 * std::ldexp(1.0, -24);
  for (const auto* side : {&r.jit, &r.ref}) {
    const auto& out = *side;
    for (int i = 0; i < 6; ++i)
      for (int k = 0; k < 2; ++k) {
        const double want = (k == 0 ? da : db)[i], got = out[k][i];
        INFO((side == &r.jit ? "backend" : "reference") << where << ": d/d" << (k == 0 ? "a" : "b")
             << " at a = " << av[i] << ", b = " << bv[i] << ": got " << got << ", want " << want);
        if (std::isinf(want) || want == 0) CHECK(got == want);
        else CHECK(std::abs(got - want) <= tol * std::abs(want));
      }
  }
}

// SGD with momentum written as update ops, fetching a weight too (its value before the step).
// Returns the run, for backend-specific checks of the program.
inline JitRun momentum_step(const Runner& run, const std::string& where) {
  Graph g;
  GraphScope use(g);
  auto x = input("x", {kBatch, 6});
  auto labels = input("labels", {kBatch}, DType::i32);
  auto logits = dense(relu(dense(x, 5, "fc1")), 3, "fc2");
  auto loss = mean(softmax_cross_entropy(logits, labels));
  auto vars = trainable_variables();
  auto grads = grad(loss, vars);
  for (size_t i = 0; i < vars.size(); ++i) {
    const std::string name = vars[i].node().attrs.name + "/momentum";
    auto m = variable(name, vars[i].shape(), {.init = init::zeros(), .trainable = false});
    auto m_next = 0.9 * m + grads[i];
    assign(m, m_next);
    assign(vars[i], vars[i] - 0.05 * m_next);
  }
  reference::Array l({7}, DType::i32);
  for (int i = 0; i < 7; ++i) l[i] = i % 3;
  auto values = reference::initialize_variables(g, 11);
  auto r = run(g, {loss, vars[0]}, {{"x", random_array({7, 6}, 8)}, {"labels", l}}, values, /*updates=*/true, 0);
  require_close(r, "momentum step" + where);
  return r;
}

}  // namespace towerjit::testing::cases
