// Every op's value in the reference interpreter, on small cases worked out by hand or in
// closed form: leaves, elementwise ops, reductions and layout (the nn ops are in
// test_op_values_nn.cpp). The interpreter is the oracle for every backend, so these are its own.
#include <catch2/catch.hpp>

#include <cmath>

#include "dsl/ops.h"
#include "dsl/ops_internal.h"
#include "jit/reference/interpreter.h"
#include "tests/reference/value_test_util.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::reference::Array;
using tj::reference::Feeds;
using tj::reference::Variables;
using namespace tj::reference::testing;

TEST_CASE("constants broadcast their value, B binds from the feeds", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  require_values(eval(tj::constant(2.5, {2, 3})), {2, 3}, {2.5, 2.5, 2.5, 2.5, 2.5, 2.5});
  require_values(eval(tj::constant(-3.7, {2}, tj::DType::i32)), {2}, {-3, -3});
  auto x = tj::input("x", {kBatch, 2});
  auto c = x + tj::constant(1, {kBatch, 1});
  require_values(eval(c, {{"x", iota({3, 2})}}), {3, 2}, {2, 3, 4, 5, 6, 7});
  // A fed input binds B even when the fetch does not read it (gradients of zeros do this).
  require_values(eval(tj::constant(4, {kBatch}), {{"x", iota({2, 2})}}), {2}, {4, 4});
}

TEST_CASE("unary ops", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {7});
  Feeds f{{"x", Array({7}, {-2, -1, -0.5, 0, 0.5, 1, 2})}};
  auto each = [&](tj::Tensor t, double (*fn)(double)) {
    std::vector<double> want;
    for (double v : f["x"].data) want.push_back(fn(v));
    require_values(eval(t, f), {7}, want, 1e-15);
  };
  each(tj::neg(x), [](double v) { return -v; });
  each(tj::abs(x), [](double v) { return std::fabs(v); });
  require_values(eval(tj::sign(x), f), {7}, {-1, -1, -1, 0, 1, 1, 1});
  require_values(eval(tj::relu(x), f), {7}, {0, 0, 0, 0, 0.5, 1, 2});
  each(tj::exp(x), [](double v) { return std::exp(v); });
  each(tj::sigmoid(x), [](double v) { return 1 / (1 + std::exp(-v)); });
  each(tj::tanh(x), [](double v) { return std::tanh(v); });
  each(tj::erf(x), [](double v) { return std::erf(v); });
  each(tj::stop_gradient(x), [](double v) { return v; });
  // Exact gelu: gelu(1) = Phi(1) = 0.841344746..., gelu(-1) = -(1 - Phi(1)).
  const Array gelu = eval(tj::gelu(x), f);
  CHECK(gelu[5] == Approx(0.8413447460685429).epsilon(1e-14));
  CHECK(gelu[1] == Approx(-0.15865525393145707).epsilon(1e-13));
  CHECK(gelu[3] == 0);
  // Its slope, the gelu_grad node of its gradient: Phi(x) + x phi(x); Phi(1) + phi(1) =
  // 0.841344746... + 0.241970724..., Phi(-1) - phi(1) below zero, 1/2 at 0.
  const Array slope = eval(tj::detail::make(g, tj::Op::GeluGrad, {x.id()}, x.shape(), tj::DType::f32, {}, tj::Loc::current()), f);
  CHECK(slope[5] == Approx(1.0833154705876864).epsilon(1e-14));
  CHECK(slope[1] == Approx(-0.08331547058768630).epsilon(1e-13));
  CHECK(slope[3] == 0.5);
  auto p = tj::input("p", {4});
  Feeds fp{{"p", Array({4}, {0.25, 1, 4, 100})}};
  require_values(eval(tj::sqrt(p), fp), {4}, {0.5, 1, 2, 10});
  require_values(eval(tj::rsqrt(p), fp), {4}, {2, 1, 0.5, 0.1});
  require_values(eval(tj::log(p), fp), {4}, {std::log(0.25), 0, std::log(4), std::log(100)});
}

TEST_CASE("softplus is stable at large magnitudes", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {5});
  const Array y = eval(tj::softplus(x), {{"x", Array({5}, {-1000, -1, 0, 1, 1000})}});
  CHECK(y[0] == Approx(0).margin(1e-300));
  CHECK(y[1] == Approx(std::log(1 + std::exp(-1.0))));
  CHECK(y[2] == Approx(std::log(2.0)));
  CHECK(y[3] == Approx(std::log(1 + std::exp(1.0))));
  CHECK(y[4] == 1000);  // log(1 + e^1000) overflows if computed naively
}

TEST_CASE("cast truncates toward zero", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {6});
  Feeds f{{"x", Array({6}, {-2.7, -2.2, -0.5, 0.5, 2.2, 2.7})}};
  const Array i = eval(tj::cast(x, tj::DType::i32), f);
  CHECK(i.dtype == tj::DType::i32);
  require_values(i, {6}, {-2, -2, 0, 0, 2, 2});
  auto k = tj::input("k", {2}, tj::DType::i32);
  const Array back = eval(tj::cast(k, tj::DType::f32), {{"k", Array({2}, {-3, 4}, tj::DType::i32)}});
  CHECK(back.dtype == tj::DType::f32);
  require_values(back, {2}, {-3, 4});
}

TEST_CASE("binary ops broadcast as numpy", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto col = tj::input("col", {3, 1});
  auto row = tj::input("row", {1, 4});
  Feeds f{{"col", Array({3, 1}, {0, 10, 20})}, {"row", Array({1, 4}, {1, 2, 3, 4})}};
  require_values(eval(col + row, f), {3, 4}, {1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24});
  require_values(eval(col - row, f), {3, 4}, {-1, -2, -3, -4, 9, 8, 7, 6, 19, 18, 17, 16});
  auto v = tj::input("v", {7});
  Feeds fv{{"v", iota({7})}};
  require_values(eval(v * 2.0, fv), {7}, {2, 4, 6, 8, 10, 12, 14});
  require_values(eval(1.0 + v, fv), {7}, {2, 3, 4, 5, 6, 7, 8});
  require_values(eval(v / 4.0, fv), {7}, {0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75});
  require_values(eval(tj::maximum(v, 4.0), fv), {7}, {4, 4, 4, 4, 5, 6, 7});
  require_values(eval(tj::minimum(v, 4.0), fv), {7}, {1, 2, 3, 4, 4, 4, 4});
  require_values(eval(tj::pow(v, 2.0), fv), {7}, {1, 4, 9, 16, 25, 36, 49});
}

TEST_CASE("comparisons give 1 or 0, i32 division truncates", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto a = tj::input("a", {3});
  auto b = tj::input("b", {3});
  Feeds f{{"a", Array({3}, {1, 2, 3})}, {"b", Array({3}, {2, 2, 2})}};
  require_values(eval(a < b, f), {3}, {1, 0, 0});
  require_values(eval(a <= b, f), {3}, {1, 1, 0});
  require_values(eval(a > b, f), {3}, {0, 0, 1});
  require_values(eval(a >= b, f), {3}, {0, 1, 1});
  require_values(eval(a == b, f), {3}, {0, 1, 0});
  require_values(eval(a != b, f), {3}, {1, 0, 1});
  auto n = tj::input("n", {4}, tj::DType::i32);
  auto d = tj::input("d", {4}, tj::DType::i32);
  Feeds fi{{"n", Array({4}, {7, -7, 7, -7}, tj::DType::i32)},
           {"d", Array({4}, {2, 2, -2, -2}, tj::DType::i32)}};
  const Array q = eval(n / d, fi);
  CHECK(q.dtype == tj::DType::i32);
  require_values(q, {4}, {3, -3, -3, 3});
  const Array lt = eval(n < d, fi);
  CHECK(lt.dtype == tj::DType::i32);
  require_values(lt, {4}, {0, 1, 0, 1});
}

TEST_CASE("where selects with three-way broadcasting", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto cond = tj::input("cond", {3, 1});
  auto a = tj::input("a", {1, 4});
  Feeds f{{"cond", Array({3, 1}, {1, 0, -2})}, {"a", Array({1, 4}, {1, 2, 3, 4})}};
  require_values(eval(tj::where(cond, a, -1.0), f), {3, 4},
                 {1, 2, 3, 4, -1, -1, -1, -1, 1, 2, 3, 4});
}

TEST_CASE("reductions: sums in closed form, keepdims, negative axes", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto v = tj::input("v", {127});
  Feeds fv{{"v", iota({127})}};
  require_values(eval(tj::sum(v), fv), {}, {127.0 * 128 / 2});
  require_values(eval(tj::mean(v), fv), {}, {64});
  require_values(eval(tj::max(v), fv), {}, {127});
  auto one = tj::input("one", {1});
  require_values(eval(tj::sum(one), {{"one", Array({1}, {-4})}}), {}, {-4});

  auto x = tj::input("x", {2, 3});  // [[1,2,3],[4,5,6]]
  Feeds f{{"x", iota({2, 3})}};
  require_values(eval(tj::sum(x, {0}), f), {3}, {5, 7, 9});
  require_values(eval(tj::sum(x, {-1}), f), {2}, {6, 15});
  require_values(eval(tj::sum(x, {-1}, true), f), {2, 1}, {6, 15});
  require_values(eval(tj::mean(x, {0}, true), f), {1, 3}, {2.5, 3.5, 4.5});
  require_values(eval(tj::max(x, {1}), f), {2}, {3, 6});
  require_values(eval(tj::max(x, {0, 1}, true), f), {1, 1}, {6});
  auto y = tj::input("y", {2, 3, 2});  // 1..12
  Feeds fy{{"y", iota({2, 3, 2})}};
  require_values(eval(tj::sum(y, {0, 2}), fy), {3}, {1 + 2 + 7 + 8, 3 + 4 + 9 + 10, 5 + 6 + 11 + 12});
  require_values(eval(tj::max(y, {-2}, true), fy), {2, 1, 2}, {5, 6, 11, 12});
}

TEST_CASE("reductions and count over the batch", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 2});
  Feeds f{{"x", iota({5, 2})}};  // columns 1,3,5,7,9 and 2,4,6,8,10
  require_values(eval(tj::sum(x, {0}), f), {2}, {25, 30});
  require_values(eval(tj::mean(x, {0}), f), {2}, {5, 6});
  require_values(eval(tj::sum(x, {1}), f), {5}, {3, 7, 11, 15, 19});
  tj::Attrs attrs;
  attrs.axes = {0, 1};
  auto n = tj::detail::make(g, tj::Op::Count, {x.id()}, tj::Shape{}, tj::DType::f32, attrs,
                            tj::Loc::current());
  require_values(eval(n, f), {}, {10});
  attrs.axes = {0};
  auto rows = tj::detail::make(g, tj::Op::Count, {x.id()}, tj::Shape{}, tj::DType::f32, attrs,
                               tj::Loc::current());
  require_values(eval(rows, f), {}, {5});
  require_values(eval(rows, {{"x", iota({7, 2})}}), {}, {7});
}

TEST_CASE("reshape, transpose, broadcast_to", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {2, 3});  // [[1,2,3],[4,5,6]]
  Feeds f{{"x", iota({2, 3})}};
  require_values(eval(tj::reshape(x, {3, 2}), f), {3, 2}, {1, 2, 3, 4, 5, 6});
  require_values(eval(tj::transpose(x), f), {3, 2}, {1, 4, 2, 5, 3, 6});
  auto y = tj::input("y", {2, 3, 4});
  // out dim i = in dim perm[i]: out[k][i][j] = y[i][j][k].
  const Array t = eval(tj::transpose(y, {2, 0, 1}), {{"y", iota({2, 3, 4}, 0)}});
  REQUIRE(t.shape == tj::Shape{4, 2, 3});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) CHECK(t[(k * 2 + i) * 3 + j] == i * 12 + j * 4 + k);
  auto col = tj::input("col", {3, 1});
  require_values(eval(tj::broadcast_to(col, {2, 3, 2}), {{"col", Array({3, 1}, {1, 2, 3})}}),
                 {2, 3, 2}, {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
}

TEST_CASE("slice, pad, concat, split", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {3, 4});  // rows 1..4, 5..8, 9..12
  Feeds f{{"x", iota({3, 4})}};
  require_values(eval(tj::slice(x, {1, 1}, {3, 3}), f), {2, 2}, {6, 7, 10, 11});
  auto v = tj::input("v", {2, 2});
  Feeds fv{{"v", iota({2, 2})}};
  require_values(eval(tj::pad(v, {1, 0}, {0, 2}), fv), {3, 4},
                 {0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0});
  auto w = tj::input("w", {2, 1});
  Feeds fvw{{"v", iota({2, 2})}, {"w", Array({2, 1}, {-1, -2})}};
  require_values(eval(tj::concat({v, w, v}, 1), fvw), {2, 5}, {1, 2, -1, 1, 2, 3, 4, -2, 3, 4});
  require_values(eval(tj::concat({v, v}, -2), fv), {4, 2}, {1, 2, 3, 4, 1, 2, 3, 4});
  auto parts = tj::split(x, std::vector<int64_t>{1, 3}, 1);
  require_values(eval(parts[0], f), {3, 1}, {1, 5, 9});
  require_values(eval(parts[1], f), {3, 3}, {2, 3, 4, 6, 7, 8, 10, 11, 12});
  auto halves = tj::split(x, 2, -1);
  require_values(eval(halves[1], f), {3, 2}, {3, 4, 7, 8, 11, 12});
  auto b = tj::input("b", {kBatch, 3});
  require_values(eval(tj::slice(b, {0, 2}, {kBatch, 3}), {{"b", iota({2, 3})}}), {2, 1}, {3, 6});
}

