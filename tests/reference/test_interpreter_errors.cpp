// What the reference interpreter says when a run cannot go ahead: each expected failure is a
// test, and each checks the message names the object, the values and the user's line.
#include <catch2/catch.hpp>

#include <string>

#include "dsl/error.h"
#include "dsl/ops.h"
#include "dsl/variables.h"
#include "jit/reference/interpreter.h"

// Where each mistake below is reported: the line of this file that made it (checked as the
// file, the line being the call's).
static const std::string here = "tests/reference/test_interpreter_errors.cpp:";

namespace tj = towerjit;
using Catch::Contains;
using tj::kBatch;
using tj::reference::Array;
using tj::reference::Feeds;
using tj::reference::Variables;

namespace {

const std::string kFile = "tests/reference/test_interpreter_errors.cpp:";

std::vector<Array> run(tj::Tensor t, const Feeds& feeds) {
  Variables vars;
  return tj::reference::run(t.graph(), {t}, feeds, vars);
}

}  // namespace

TEST_CASE("a needed input that is not fed is named", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const std::string line = kFile + std::to_string(__LINE__ + 1);
  auto x = tj::input("pixels", {kBatch, 4});
  auto y = tj::relu(x);
  REQUIRE_THROWS_AS(run(y, {}), tj::Error);
  REQUIRE_THROWS_WITH(run(y, {}), (Contains("\"pixels\"") && Contains("not fed") &&
                                      Contains("f32[B,4]") && Contains(line)) && Catch::Contains(here));
  // Inputs the fetches do not need may go unfed.
  auto unused = tj::input("unused", {3});
  REQUIRE(run(y, {{"pixels", Array({2, 4})}}).at(0).shape == tj::Shape{2, 4});
  (void)unused;
}

TEST_CASE("a feed of the wrong shape or dtype names the input, expected and got", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("image", {kBatch, 28, 28});
  auto y = tj::sum(x);
  REQUIRE_THROWS_WITH(run(y, {{"image", Array({2, 28, 27})}}), (Contains("\"image\"") && Contains("[B,28,28]") && Contains("[2,28,27]") &&
                          Contains("dimension 2")) && Catch::Contains(here));
  REQUIRE_THROWS_WITH(run(y, {{"image", Array({2, 784})}}), (Contains("\"image\"") && Contains("[B,28,28]") && Contains("[2,784]")) && Catch::Contains(here));
  REQUIRE_THROWS_WITH(run(y, {{"image", Array({2, 28, 28}, tj::DType::i32)}}), (Contains("\"image\"") && Contains("f32[B,28,28]") &&
                          Contains("i32[2,28,28]")) && Catch::Contains(here));
  Array short_data({2, 28, 28});
  short_data.data.resize(5);
  REQUIRE_THROWS_WITH(run(y, {{"image", short_data}}), (Contains("\"image\"") && Contains("5 elements")) && Catch::Contains(here));
}

TEST_CASE("inputs that disagree on the batch size are both named", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 3});
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  auto loss = tj::softmax_cross_entropy(x, labels);
  Feeds f{{"x", Array({4, 3})}, {"labels", Array({5}, tj::DType::i32)}};
  REQUIRE_THROWS_WITH(run(loss, f), (Contains("\"x\"") && Contains("\"labels\"") &&
                                        Contains("B = 4") && Contains("B = 5")) && Catch::Contains(here));
  f["labels"] = Array({4}, tj::DType::i32);
  REQUIRE(run(loss, f).at(0).shape == tj::Shape{4});
}

TEST_CASE("a batch size no input fixes is an error", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const std::string line = kFile + std::to_string(__LINE__ + 1);
  auto c = tj::constant(1, {kBatch, 2});
  REQUIRE_THROWS_WITH(run(c, {}), (Contains("batch size unknown") && Contains(line)) && Catch::Contains(here));
}

TEST_CASE("a missing or ill-shaped variable is named", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto w = tj::variable("kernel", {3, 2}, {.init = tj::init::zeros()});
  auto y = w * 2.0;
  Variables none;
  REQUIRE_THROWS_WITH(tj::reference::run(g, {y}, {}, none), (Contains("\"kernel\"") && Contains("missing") && Contains("[3,2]")) && Catch::Contains(here));
  Variables wrong{{"kernel", Array({2, 3})}};
  REQUIRE_THROWS_WITH(tj::reference::run(g, {y}, {}, wrong), (Contains("\"kernel\"") && Contains("[3,2]") && Contains("[2,3]")) && Catch::Contains(here));
}

TEST_CASE("labels out of range are reported at evaluation with the user's line", "[reference]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto logits = tj::input("logits", {kBatch, 10});
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  const std::string loss_line = kFile + std::to_string(__LINE__ + 1);
  auto loss = tj::softmax_cross_entropy(logits, labels);
  const std::string hot_line = kFile + std::to_string(__LINE__ + 1);
  auto hot = tj::one_hot(labels, 10);
  Feeds f{{"logits", Array({5, 10})},
          {"labels", Array({5}, {0, 9, 3, 12, 1}, tj::DType::i32)}};
  REQUIRE_THROWS_AS(run(loss, f), tj::Error);
  REQUIRE_THROWS_WITH(run(loss, f), (Contains("one_hot") && Contains("label 12") &&
                                        Contains("index 3") && Contains("[0, 10)") &&
                                        Contains("out of range") && Contains(loss_line)) && Catch::Contains(here));
  REQUIRE_THROWS_WITH(run(hot, f), (Contains("one_hot") && Contains("12") && Contains(hot_line)) && Catch::Contains(here));
  f["labels"] = Array({5}, {0, 9, -1, 2, 1}, tj::DType::i32);
  REQUIRE_THROWS_WITH(run(hot, f), (Contains("label -1") && Contains("index 2")) && Catch::Contains(here));
}
