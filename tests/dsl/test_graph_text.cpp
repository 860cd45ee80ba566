// Graph::str(): one line per node with the op, its inputs, dtype and shape (B for the batch),
// and the user's file:line, so a dump can be read against the model's source.
#include <algorithm>

#include <catch2/catch.hpp>

#include "towerjit.h"

using namespace towerjit;
using Catch::Contains;

namespace {
std::string here(int line) { return "tests/dsl/test_graph_text.cpp:" + std::to_string(line); }
}  // namespace

TEST_CASE("Graph::str shows op, inputs, dtype, shape with B and file:line", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 784});  const std::string x_at = here(__LINE__);
  Tensor w = input("w", {784, 10});
  Tensor y = matmul(x, w);  const std::string y_at = here(__LINE__);
  input("labels", {kBatch}, DType::i32);
  Tensor am = argmax(y);

  const std::string text = g.str();
  CHECK_THAT(text, Contains("%0 = input() \"x\" : f32[B,784]  @ " + x_at));
  CHECK_THAT(text, Contains("%2 = matmul(%0, %1) : f32[B,10]  @ " + y_at));
  CHECK_THAT(text, Contains("input() \"labels\" : i32[B]"));
  CHECK_THAT(g.node_str(am.id()), Contains("argmax(%2) axis=1 : i32[B]"));
  // One line per node.
  CHECK(std::count(text.begin(), text.end(), '\n') == g.size());
}

TEST_CASE("Graph::str: a composite op points every node at the user's line", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 10});
  const int before = g.size();
  Tensor p = softmax(x, {.fused = false});  const std::string at = here(__LINE__);
  REQUIRE(g.size() > before + 1);
  for (int id = before; id < g.size(); ++id) CHECK_THAT(g.node_str(id), Contains("@ " + at));
  CHECK_THAT(g.node_str(p.id()), Contains("exp(") && Contains(": f32[B,10]"));
}

TEST_CASE("Graph::str shows the scope a node was built in", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 7});
  Tensor s;
  {
    VariableScope scope("encoder");
    s = sum(x, {-1}, true);
  }
  CHECK_THAT(g.node_str(s.id()), Contains("sum(%0) axes=[1] keepdims : f32[B,1]") && Contains("in \"encoder\""));
  CHECK_THAT(g.node_str(x.id()), !Contains("encoder"));
}
