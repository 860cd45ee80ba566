// The reference interpreter's values for the neural-network ops: matmul, one_hot, argmax, the
// softmax family, convolutions and pools with their gradients, random numbers and assign.
#include <catch2/catch.hpp>

#include <cmath>

#include "dsl/ops.h"
#include "dsl/ops_internal.h"
#include "dsl/philox.h"
#include "dsl/variables.h"
#include "jit/reference/interpreter.h"
#include "tests/reference/value_test_util.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::reference::Array;
using tj::reference::Feeds;
using tj::reference::Variables;
using namespace tj::reference::testing;

TEST_CASE("matmul, 2-D and batched with broadcast batch dimensions", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto a = tj::input("a", {2, 3});
  auto b = tj::input("b", {3, 2});
  // [[1,2,3],[4,5,6]] x [[7,8],[9,10],[11,12]] = [[58,64],[139,154]]
  Feeds f{{"a", iota({2, 3})}, {"b", iota({3, 2}, 7)}};
  require_values(eval(tj::matmul(a, b), f), {2, 2}, {58, 64, 139, 154});
  auto s = tj::input("s", {2, 1, 2});  // two 1x2 matrices: [1,2] and [3,4]
  auto m = tj::input("m", {2, 2});     // [[1,0],[1,1]], shared by both
  Feeds fs{{"s", iota({2, 1, 2})}, {"m", Array({2, 2}, {1, 0, 1, 1})}};
  require_values(eval(tj::matmul(s, m), fs), {2, 1, 2}, {3, 2, 7, 4});
  auto l = tj::input("l", {3, 1, 1, 2});  // batch dims [3,1] with [2]
  auto r = tj::input("r", {2, 2, 1});     // [[1],[1]] and [[1],[-1]]
  Feeds fl{{"l", iota({3, 1, 1, 2})}, {"r", Array({2, 2, 1}, {1, 1, 1, -1})}};
  // Row k is [2k+1, 2k+2]: times [1,1] gives 4k+3, times [1,-1] gives -1.
  require_values(eval(tj::matmul(l, r), fl), {3, 2, 1, 1}, {3, -1, 7, -1, 11, -1});
}

TEST_CASE("one_hot and argmax", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto idx = tj::input("idx", {kBatch}, tj::DType::i32);
  require_values(eval(tj::one_hot(idx, 3), {{"idx", Array({3}, {2, 0, 1}, tj::DType::i32)}}),
                 {3, 3}, {0, 0, 1, 1, 0, 0, 0, 1, 0});
  auto x = tj::input("x", {3, 4});
  // Ties: the first maximum wins.
  Feeds f{{"x", Array({3, 4}, {1, 5, 5, 0, 7, 7, 7, 7, -1, -3, -2, -1})}};
  const Array am = eval(tj::argmax(x), f);
  CHECK(am.dtype == tj::DType::i32);
  require_values(am, {3}, {1, 0, 0});
  require_values(eval(tj::argmax(x, 0), f), {4}, {1, 1, 1, 1});
}

TEST_CASE("softmax and softmax_cross_entropy", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 3});
  const std::vector<double> v = {1, 2, 3, -1, 0, 1000};
  Feeds f{{"x", Array({2, 3}, v)}, {"y", Array({2}, {2, 0}, tj::DType::i32)},
          {"p", Array({2, 3}, {0, 0, 1, 1, 0, 0})}};
  const Array s = eval(tj::softmax(x), f);
  for (int r = 0; r < 2; ++r) {
    CHECK(s[r * 3] + s[r * 3 + 1] + s[r * 3 + 2] == Approx(1).epsilon(1e-15));
  }
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  for (int c = 0; c < 3; ++c) CHECK(s[c] == Approx(std::exp(v[c]) / z).epsilon(1e-14));
  CHECK(s[5] == Approx(1));  // exp(1000) alone would overflow
  auto labels = tj::input("y", {kBatch}, tj::DType::i32);
  auto probs = tj::input("p", {kBatch, 3});
  const double lse0 = std::log(z);
  // Row 1: log(e^-1 + e^0 + e^1000) = 1000 + log(1 + e^-1000 + e^-1001) ~ 1000.
  const double lse1 = 1000 + std::log1p(std::exp(-1000.0) + std::exp(-1001.0));
  require_values(eval(tj::logsumexp(x, {1}), f), {2}, {lse0, lse1}, 1e-12);
  const std::vector<double> want = {lse0 - 3, lse1 - (-1)};
  require_values(eval(tj::softmax_cross_entropy(x, labels), f), {2}, want, 1e-12);
  require_values(eval(tj::softmax_cross_entropy(x, probs), f), {2}, want, 1e-12);
}

TEST_CASE("conv2d: 1x1x3x3 with a 3x3 kernel, stride 2, pad 1", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {1, 1, 3, 3});  // 1..9
  auto w = tj::input("w", {1, 1, 3, 3});  // 1..9
  Feeds f{{"x", iota({1, 1, 3, 3})}, {"w", iota({1, 1, 3, 3})}};
  // Top-left window (zero-padded) [[0,0,0],[0,1,2],[0,4,5]]: 5*1 + 6*2 + 8*4 + 9*5 = 94.
  // Top-right [[0,0,0],[2,3,0],[5,6,0]]: 4*2 + 5*3 + 7*5 + 8*6 = 106; the rest by symmetry.
  require_values(eval(tj::conv2d(x, w, {.stride = 2, .pad = 1}), f), {1, 1, 2, 2},
                 {94, 106, 106, 94});
  // Channels mix: a 1x1 kernel [[1,10],[2,0]] over 2 channels [1,2] and [3,4].
  auto xc = tj::input("xc", {1, 2, 1, 2});
  auto wc = tj::input("wc", {2, 2, 1, 1});
  Feeds fc{{"xc", iota({1, 2, 1, 2})}, {"wc", Array({2, 2, 1, 1}, {1, 10, 2, 0})}};
  require_values(eval(tj::conv2d(xc, wc), fc), {1, 2, 1, 2}, {31, 42, 2, 4});
}

namespace {

double dot(const Array& a, const Array& b) {
  double s = 0;
  for (int64_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

tj::Tensor make_node(tj::Graph& g, tj::Op op, std::vector<int> inputs, tj::Shape shape,
                     tj::Attrs attrs) {
  attrs.shape = shape;
  return tj::detail::make(g, op, std::move(inputs), shape, tj::DType::f32, attrs,
                          tj::Loc::current());
}

}  // namespace

TEST_CASE("conv2d gradients are its adjoints", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {2, 2, 5, 4});
  auto w = tj::input("w", {3, 2, 3, 2});
  auto y = tj::conv2d(x, w, {.stride = 2, .pad = 1});  // [2,3,3,3]
  auto dy = tj::input("dy", y.shape());
  auto dx = make_node(g, tj::Op::Conv2DGradInput, {dy.id(), w.id()}, x.shape(), y.node().attrs);
  auto dw = make_node(g, tj::Op::Conv2DGradFilter, {x.id(), dy.id()}, w.shape(), y.node().attrs);
  Feeds f;
  auto fill = [](tj::Shape s, int salt) {
    Array a(s);
    for (int64_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>((i * 7 + salt) % 11) - 5;
    return a;
  };
  f["x"] = fill(x.shape(), 1);
  f["w"] = fill(w.shape(), 2);
  f["dy"] = fill(y.shape(), 3);
  Variables vars;
  auto out = tj::reference::run(g, {y, dx, dw}, f, vars);
  // <conv(x, w), dy> = <x, dx> = <w, dw>: each is the same sum of x * w * dy terms.
  const double forward = dot(out[0], f["dy"]);
  CHECK(dot(f["x"], out[1]) == Approx(forward));
  CHECK(dot(f["w"], out[2]) == Approx(forward));
  // One value by hand: a 1x1 kernel of 3 at stride 2 sends dy to every other pixel, times 3.
  auto x1 = tj::input("x1", {1, 1, 3, 3});
  auto w1 = tj::input("w1", {1, 1, 1, 1});
  auto y1 = tj::conv2d(x1, w1, {.stride = 2});
  auto dy1 = tj::input("dy1", {1, 1, 2, 2});
  auto dx1 = make_node(g, tj::Op::Conv2DGradInput, {dy1.id(), w1.id()}, x1.shape(),
                       y1.node().attrs);
  require_values(eval(dx1, {{"dy1", iota({1, 1, 2, 2})}, {"w1", Array({1, 1, 1, 1}, {3})}}),
                 {1, 1, 3, 3}, {3, 0, 6, 0, 0, 0, 9, 0, 12});
}

TEST_CASE("pools and their gradients", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {1, 1, 4, 4});  // 1..16
  Feeds f{{"x", iota({1, 1, 4, 4})}};
  require_values(eval(tj::max_pool2d(x), f), {1, 1, 2, 2}, {6, 8, 14, 16});
  require_values(eval(tj::avg_pool2d(x), f), {1, 1, 2, 2}, {3.5, 5.5, 11.5, 13.5});
  // 3x3 windows, stride 2, pad 1: the top-left window holds 1,2,5,6 and five zeros of padding.
  const tj::Pool2DOptions o{.kernel = 3, .stride = 2, .pad = 1};
  require_values(eval(tj::avg_pool2d(x, o), f), {1, 1, 2, 2},
                 {14.0 / 9, 30.0 / 9, 57.0 / 9, 99.0 / 9});
  auto n = tj::input("n", {1, 1, 2, 2});  // padding is -infinity, not 0
  require_values(eval(tj::max_pool2d(n, {.kernel = 2, .stride = 1, .pad = 1}),
                      {{"n", Array({1, 1, 2, 2}, {-1, -2, -3, -4})}}),
                 {1, 1, 3, 3}, {-1, -1, -2, -1, -1, -2, -3, -3, -4});

  // max_pool2d_grad: ties go to the first maximum; overlapping windows accumulate.
  auto t = tj::input("t", {1, 1, 3, 3});
  auto pooled = tj::max_pool2d(t, {.kernel = 2, .stride = 1});  // [1,1,2,2]
  auto dy = tj::input("dy", {1, 1, 2, 2});
  auto dx = make_node(g, tj::Op::MaxPool2DGrad, {t.id(), dy.id()}, t.shape(),
                      pooled.node().attrs);
  Feeds ft{{"t", Array({1, 1, 3, 3}, {5, 5, 0, 5, 9, 1, 0, 2, 3})},
           {"dy", Array({1, 1, 2, 2}, {1, 10, 100, 1000})}};
  require_values(eval(dx, ft), {1, 1, 3, 3}, {0, 0, 0, 0, 1111, 0, 0, 0, 0});
  ft["t"] = Array({1, 1, 3, 3}, {7, 7, 7, 7, 7, 7, 7, 7, 7});
  require_values(eval(dx, ft), {1, 1, 3, 3}, {1, 10, 0, 100, 1000, 0, 0, 0, 0});

  auto ap = tj::avg_pool2d(t, {.kernel = 2, .stride = 1});
  auto adx = make_node(g, tj::Op::AvgPool2DGrad, {dy.id()}, t.shape(), ap.node().attrs);
  require_values(eval(adx, ft), {1, 1, 3, 3},
                 {0.25, 2.75, 2.5, 25.25, 277.75, 252.5, 25, 275, 250});
}

TEST_CASE("random_uniform is Philox keyed by seed, step and element", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 3});
  auto r = tj::random_uniform_like(x, 42);
  Feeds f{{"x", Array({2, 3})}};
  Variables vars;
  const Array s0 = tj::reference::run(g, {r}, f, vars, {.step = 0}).at(0);
  const Array s5 = tj::reference::run(g, {r}, f, vars, {.step = 5}).at(0);
  REQUIRE(s0.shape == tj::Shape{2, 3});
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(s0[i] == tj::philox_uniform(42, 0, i));
    CHECK(s5[i] == tj::philox_uniform(42, 5, i));
    CHECK(s0[i] >= 0);
    CHECK(s0[i] < 1);
  }
  CHECK(s0.data != s5.data);
}

TEST_CASE("assign writes after the step when update ops run", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto v = tj::variable("v", {2}, {.init = tj::init::zeros()});
  auto x = tj::input("x", {2});
  auto next = tj::assign(v, v + x);
  auto read = v * 1.0;
  Variables vars{{"v", Array({2}, {1, 2})}};
  Feeds f{{"x", Array({2}, {10, 20})}};
  // Without run_update_ops nothing is written, even when the assign is fetched.
  auto out = tj::reference::run(g, {next}, f, vars);
  require_values(out[0], {2}, {11, 22});
  require_values(vars["v"], {2}, {1, 2});
  // With them, the step reads the old value and the variable holds the new one afterwards.
  out = tj::reference::run(g, {read}, f, vars, {.run_update_ops = true});
  require_values(out[0], {2}, {1, 2});
  require_values(vars["v"], {2}, {11, 22});
  tj::reference::run(g, {}, f, vars, {.run_update_ops = true});
  require_values(vars["v"], {2}, {21, 42});
}

TEST_CASE("initialize_variables samples each variable by its name", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  tj::variable("w", {3, 2}, {.init = tj::init::uniform(-1, 1)});
  // (tj::constant(0.5) is ambiguous with the constant tensor op, so spell the initializer.)
  tj::variable("b", {2}, {.init = {.kind = tj::Initializer::Kind::constant, .a = 0.5}});
  const Variables vars = tj::reference::initialize_variables(g, 7);
  REQUIRE(vars.size() == 2);
  const std::vector<float> w = tj::sample(tj::init::uniform(-1, 1), {3, 2}, 7, tj::stable_hash("w"));
  REQUIRE(vars.at("w").shape == tj::Shape{3, 2});
  CHECK(vars.at("w").data == std::vector<double>(w.begin(), w.end()));
  require_values(vars.at("b"), {2}, {0.5, 0.5});
}
