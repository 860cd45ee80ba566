// Gradients of the elementwise ops and reductions against central finite differences, and what
// grad() does around them: stop_gradient, tensors off the path, ties of max.
#include "tests/dsl/gradient_check.h"

namespace {

using namespace gradcheck;
using D = Domain;
using Xs = std::vector<Tensor>;

TEST_CASE("gradients of one-input ops match finite differences", "[grad]") {
  struct Case {
    const char* name;
    Tensor (*op)(Tensor, Loc);
    Domain domain;
  };
  const Case cases[] = {
      {"neg", neg, D::any},        {"exp", exp, D::any},
      {"log", log, D::positive},   {"sqrt", sqrt, D::positive},
      {"rsqrt", rsqrt, D::positive}, {"abs", abs, D::away_from_zero},
      {"relu", relu, D::away_from_zero}, {"sigmoid", sigmoid, D::any},
      {"tanh", tanh, D::any},      {"erf", erf, D::any},
      {"gelu", gelu, D::any},      {"softplus", softplus, D::any},
  };
  for (const Case& c : cases) {
    check_op(c.name, {{Shape{3, 4}, c.domain}},
             [&](const Xs& x) { return c.op(x[0], Loc::current()); });
    check_op(std::string(c.name) + " batched", {{Shape{kBatch, 3}, c.domain}},
             [&](const Xs& x) { return c.op(x[0], Loc::current()); });
  }
}

// gelu's gradient is one gelu_grad node (ops.def), differentiated in turn here, on either side
// of erf's switch to its tail (|x| / sqrt 2 = 0.9).
TEST_CASE("second derivatives of gelu match finite differences", "[grad]") {
  check_op("gelu''", {{Shape{kBatch, 5}}}, [](const Xs& x) { return grad(sum(gelu(x[0])), {x[0]})[0]; });
}

TEST_CASE("gradients of two-input ops match finite differences, broadcasting included",
          "[grad]") {
  struct Case {
    const char* name;
    Tensor (*op)(Operand, Operand, Loc);
    Domain a, b;
  };
  const Case cases[] = {
      {"add", add, D::any, D::any},
      {"sub", sub, D::any, D::any},
      {"mul", mul, D::any, D::any},
      {"div", div, D::any, D::away_from_zero},
      {"maximum", maximum, D::any, D::any},  // random values: no two are equal
      {"minimum", minimum, D::any, D::any},
      {"pow", pow, D::positive, D::any},
  };
  // Same shapes, [3,1] x [1,4], a scalar on either side, rank broadcasting and the batch.
  const std::pair<Shape, Shape> shapes[] = {
      {{3, 4}, {3, 4}}, {{3, 1}, {1, 4}}, {{3, 4}, {}},      {{}, {3, 4}},
      {{4}, {2, 3, 4}}, {{kBatch, 3}, {3}}, {{kBatch, 1}, {1, 4}}, {{kBatch, 3}, {kBatch, 3}},
  };
  for (const Case& c : cases)
    for (const auto& [sa, sb] : shapes)
      check_op(std::string(c.name) + " " + sa.str() + " " + sb.str(), {{sa, c.a}, {sb, c.b}},
               [&](const Xs& x) { return c.op(x[0], x[1], Loc::current()); });
}

TEST_CASE("gradients of operators with a plain number match finite differences", "[grad]") {
  check_op("x * 3 - 2 / x", {{Shape{kBatch, 3}, D::away_from_zero}},
           [](const Xs& x) { return x[0] * 3.0 - 2.0 / x[0]; });
  check_op("pow(x, 2.5)", {{Shape{2, 3}, D::positive}},
           [](const Xs& x) { return pow(x[0], 2.5); });
  check_op("pow(2, x)", {{Shape{2, 3}, D::any}}, [](const Xs& x) { return pow(2.0, x[0]); });
  check_op("x * x (one input used twice)", {{Shape{3}, D::any}},
           [](const Xs& x) { return x[0] * x[0]; });
}

TEST_CASE("gradient of where flows to the chosen side only", "[grad]") {
  // The condition comes from a third input that is not differentiated.
  check_op("where [3,4] [3,4]", {{Shape{3, 4}}, {Shape{3, 4}}, {Shape{3, 4}, D::any, false}},
           [](const Xs& x) { return where(x[2] > 0.0, x[0], x[1]); });
  check_op("where [3,1] [1,4]", {{Shape{3, 1}}, {Shape{1, 4}}, {Shape{3, 4}, D::any, false}},
           [](const Xs& x) { return where(x[2] > 0.0, x[0], x[1]); });
  check_op("where B with scalar", {{Shape{kBatch, 3}}, {Shape{kBatch, 1}, D::any, false}},
           [](const Xs& x) { return where(x[1] > 0.0, x[0], 0.5); });
}

TEST_CASE("gradients of reductions match finite differences", "[grad]") {
  using Reduce = Tensor (*)(Tensor, std::vector<int>, bool, Loc);
  const std::pair<const char*, Reduce> ops[] = {{"sum", sum}, {"mean", mean}, {"max", max}, {"logsumexp", logsumexp}};
  struct Axes {
    Shape shape;
    std::vector<int> axes;
    bool keepdims;
  };
  const Axes variants[] = {
      {{3, 4}, {}, false},          {{3, 4}, {1}, false},    {{3, 4}, {-1}, true},
      {{2, 3, 4}, {0, 2}, false},   {{2, 3, 4}, {-1, 0}, true},
      {{kBatch, 3}, {0}, false},    {{kBatch, 3}, {1}, true}, {{kBatch, 3}, {}, false},
      {{kBatch, 2, 3}, {0, -1}, true},
  };
  for (const auto& [name, op] : ops)
    for (const Axes& v : variants) {
      std::ostringstream what;
      what << name << " " << v.shape.str() << " axes";
      for (int a : v.axes) what << " " << a;
      what << (v.keepdims ? " keepdims" : "");
      check_op(what.str(), {{v.shape}},
               [&](const Xs& x) { return op(x[0], v.axes, v.keepdims, Loc::current()); });
    }
}

TEST_CASE("gradient of max is split evenly among ties", "[grad]") {
  Graph graph;
  GraphScope scope(graph);
  Tensor x = input("x", {2, 4});
  Tensor g = grad(sum(max(x, {1})), {x})[0];
  reference::Variables vars;
  reference::Feeds feeds{{"x", Array(Shape{2, 4}, {1, 3, 3, 2, 5, 5, 5, 0})}};
  const Array out = reference::run(graph, {g}, feeds, vars)[0];
  CHECK(out.data == std::vector<double>{0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0});
}

TEST_CASE("stop_gradient blocks the gradient", "[grad]") {
  Graph graph;
  GraphScope scope(graph);
  Tensor x = input("x", {kBatch, 3});
  // d/dx sum(x * sg(x)) is x, not 2x; sum(sg(x)) passes nothing.
  const std::vector<Tensor> g = grad(sum(x * stop_gradient(x)) + sum(stop_gradient(x)), {x});
  reference::Variables vars;
  reference::Feeds feeds{{"x", Array(Shape{2, 3}, {1, -2, 3, 0.5, 4, -6})}};
  const Array out = reference::run(graph, g, feeds, vars)[0];
  CHECK(out.data == feeds["x"].data);

  // x is fetched as well: the interpreter reads B from the inputs the fetches use, and the
  // zero gradient uses none.
  Tensor blocked = grad(sum(exp(stop_gradient(x * 2.0))), {x})[0];
  CHECK(reference::run(graph, {blocked, x}, feeds, vars)[0].data == std::vector<double>(6, 0.0));
}

TEST_CASE("a tensor the loss does not depend on gets zeros of its shape", "[grad]") {
  Graph graph;
  GraphScope scope(graph);
  Tensor x = input("x", {kBatch, 3});
  Tensor unused = input("unused", {kBatch, 2});
  Tensor late = x * 2.0;  // built from x, but the loss does not use it
  Tensor via_int = cast(cast(x, DType::i32), DType::f32);  // integers carry no gradient
  Tensor loss = sum(x) + sum(via_int);
  const std::vector<Tensor> g = grad(loss, {unused, late, x});
  CHECK(g[0].shape() == Shape{kBatch, 2});
  CHECK(g[1].shape() == Shape{kBatch, 3});
  reference::Variables vars;
  reference::Feeds feeds{{"x", Array(Shape{2, 3}, {1, 2, 3, 4, 5, 6})},
                         {"unused", Array(Shape{2, 2}, {1, 2, 3, 4})}};
  std::vector<Tensor> fetches = g;
  fetches.push_back(loss);  // fixes B; see "stop_gradient blocks the gradient"
  const std::vector<Array> out = reference::run(graph, fetches, feeds, vars);
  CHECK(out[0].data == std::vector<double>(4, 0.0));
  CHECK(out[1].data == std::vector<double>(6, 0.0));
  CHECK(out[2].data == std::vector<double>(6, 1.0));
  // The loss w.r.t. itself is 1.
  CHECK(reference::run(graph, grad(loss, {loss}), feeds, vars)[0].item() == 1.0);
}

TEST_CASE("gradient nodes point at the user's line of the forward op", "[grad]") {
  Graph graph;
  GraphScope scope(graph);
  Tensor x = input("x", {3});
  const int line = __LINE__ + 1;
  Tensor y = tanh(x);
  const int before = graph.size();
  grad(sum(y), {x});
  bool found = false;
  for (int id = before; id < graph.size(); ++id)
    found = found || (graph.node(id).op == Op::Mul &&
                      static_cast<int>(graph.node(id).loc.line()) == line);
  CHECK(found);
}

}  // namespace
