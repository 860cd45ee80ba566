// Call-stack locations (dsl/call_stack.h): an op built inside the user's helpers names every
// frame of the user's code that led to it, innermost first, not only the innermost line; a
// backward op names its forward op's; errors raised during a DSL call carry the same stack.
// This binary is built with line tables (-g1), as docs/dsl.md asks of users' programs.
#include <catch2/catch.hpp>

#include "dsl/autodiff.h"
#include "dsl/error.h"
#include "dsl/layers.h"
#include "dsl/ops.h"

using namespace towerjit;
using Catch::Contains;
using Catch::StartsWith;

namespace {

std::string here(int line) { return "tests/dsl/test_call_stack.cpp:" + std::to_string(line); }

int dense_line = 0, unit_line = 0, block_line = 0, matmul_line = 0, calls_line = 0;

// Two levels of helpers, as a model's conv_bn_relu and res_block: noinline or not, the line
// tables name both (-g1 keeps inlined frames).
Tensor dense_relu(Tensor x, const std::string& name) {
  dense_line = __LINE__ + 1;
  return relu(dense(x, 4, name));
}

Tensor block(Tensor x, const std::string& name) {
  unit_line = __LINE__ + 1;
  Tensor h = dense_relu(x, name + "_a");
  block_line = __LINE__ + 1;
  return dense_relu(h, name + "_b");
}

Tensor bad_matmul(Tensor x) {
  matmul_line = __LINE__ + 1;
  return matmul(x, x);
}

Tensor calls_bad_matmul(Tensor x) {
  calls_line = __LINE__ + 1;
  return bad_matmul(x);
}

// The nodes of op `op` in build order.
std::vector<int> nodes_of(const Graph& g, Op op, bool forward) {
  std::vector<int> ids;
  for (int i = 0; i < g.size(); ++i)
    if (g.node(i).op == op && (g.node(i).grad_of < 0) == forward) ids.push_back(i);
  return ids;
}

}  // namespace

TEST_CASE("call stack: an op built in a helper names each of the user's frames", "[dsl][locations]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 3});
  const int top_line = __LINE__ + 1;
  block(x, "b1");

  const std::vector<int> relus = nodes_of(g, Op::Relu, true);
  REQUIRE(relus.size() == 2);
  // The same innermost line for both, told apart by the frame that called the helper.
  const std::string first = format_location(g.node(relus[0]));
  const std::string second = format_location(g.node(relus[1]));
  INFO(first << "\n" << second);
  CHECK_THAT(first, StartsWith(here(dense_line) + " dense_relu ← " + here(unit_line) + " block ← " +
                               here(top_line) + " "));
  CHECK_THAT(second, StartsWith(here(dense_line) + " dense_relu ← " + here(block_line) + " block ← " +
                                here(top_line) + " "));
  // The user's frames end where the test framework (a system header) called the test.
  CHECK_THAT(first, !Contains("catch.hpp") && !Contains("main.cpp"));
  // The graph text shows them too.
  CHECK_THAT(g.node_str(relus[1]), Contains("@ " + second));
  // Every node of the layer, its variables' reads included, carries the stack.
  for (int id : nodes_of(g, Op::MatMul, true))
    CHECK_THAT(format_location(g.node(id)), Contains(" dense_relu ← "));
}

TEST_CASE("call stack: a backward op names its forward op's frames", "[dsl][locations]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 3});
  Tensor y = block(x, "b1");
  const std::vector<Tensor> vars = trainable_variables();
  grad(mean(y), vars);

  const std::vector<int> forward = nodes_of(g, Op::Relu, true);
  REQUIRE(forward.size() == 2);
  int checked = 0;
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.grad_of != forward[1]) continue;
    CHECK(format_location(n) == format_location(g.node(forward[1])));
    ++checked;
  }
  CHECK(checked > 0);
}

TEST_CASE("call stack: a shape error inside helpers names the user's frames", "[dsl][locations][errors]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 3});
  const int outer_line = __LINE__ + 2;
  try {
    calls_bad_matmul(x);
    FAIL("matmul of [B,3] by [B,3] was accepted");
  } catch (const towerjit::Error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK_THAT(message, Contains("(" + here(matmul_line) + " bad_matmul ← " + here(calls_line) +
                                 " calls_bad_matmul ← " + here(outer_line) + " "));
  }
}

TEST_CASE("call stack: a single frame reads as the plain line", "[dsl][locations]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 3});
  const int line = __LINE__ + 1;
  Tensor y = relu(x);
  // The test's own function is the only frame of the user's: nothing beyond file:line.
  CHECK(format_location(y.node()) == here(line));
}
