// More of the DSL's user mistakes, each quoted in docs/errors.md: the message says what is
// wrong, names the line of this file that made the mistake, and what to do.
#include <catch2/catch.hpp>

#include "dsl/autodiff.h"
#include "dsl/ema.h"
#include "dsl/layers.h"
#include "dsl/ops.h"
#include "dsl/phase.h"
#include "dsl/variables.h"
#include "jit/reference/interpreter.h"

using namespace towerjit;
using Catch::Contains;

namespace {
constexpr int64_t B = kBatch;

// Where a call on line `line` of this file is reported; pass __LINE__ on the call's own line.
std::string here(int line) { return "tests/dsl/test_more_errors.cpp:" + std::to_string(line); }
}  // namespace

TEST_CASE("layers: an empty input or an empty name", "[dsl][errors]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 3});
  REQUIRE_THROWS_WITH(dense(Tensor{}, 4, "fc1"), Contains("dense \"fc1\": the input is an empty tensor") && Contains("build it with an op") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(dense(x, 4, ""), Contains("dense: the name is empty") && Contains("layers need a name to scope their variables") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(dropout(Tensor{}, 0.5), Contains("dropout: the input is an empty tensor") && Contains(here(__LINE__)));
}

TEST_CASE("layers: dense of a scalar, and a dropout rate of 1 or more", "[dsl][errors]") {
  Graph g;
  GraphScope use(g);
  REQUIRE_THROWS_WITH(dense(input("s", Shape{}), 4, "fc1"), Contains("dense \"fc1\": expects an input with a feature axis but got the scalar") && Contains("reshape it to [B, features]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(dropout(input("x", {B, 3}), 1.5), Contains("dropout: rate 1.5 is outside [0, 1)") && Contains("use rate 0 to disable") && Contains(here(__LINE__)));
}

TEST_CASE("conv2d layer: input that is not NCHW, a batch channel axis, zero filters", "[dsl][errors]") {
  Graph g;
  GraphScope use(g);
  REQUIRE_THROWS_WITH(conv2d(input("x", {B, 3, 8}), 4, 3, "conv1"), Contains("conv2d \"conv1\": expects x as [N, C, H, W] (NCHW)") && Contains("reshape the input to 4 axes") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(conv2d(input("y", {2, B, 8, 8}), 4, 3, "conv1"), Contains("the channel axis (1)") && Contains("is the batch dimension B") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(conv2d(input("z", {B, 3, 8, 8}), 0, 3, "conv1"), Contains("filters (0) and kernel_size (3) must be positive") && Contains(here(__LINE__)));
}

TEST_CASE("batch_norm: an axis out of range or on the batch", "[dsl][errors]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 3});
  // A literal name with braced options, as users write it (dsl/layers.h's const char* overload:
  // without it "bn" became `training` and a std::logic_error came out).
  REQUIRE_THROWS_WITH(batch_norm(x, "bn", {.axis = 5}), Contains("batch_norm \"bn\": axis 5 is out of range for f32[B,3]") && Contains("use 1 for NCHW or [N, features]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(batch_norm(x, "bn", {.axis = 0}), Contains("the channel axis 0 of f32[B,3]") && Contains("pass the feature axis") && Contains(here(__LINE__)));
}

TEST_CASE("input: an empty name, a name taken, the batch twice", "[dsl][errors]") {
  Graph g;
  GraphScope use(g);
  REQUIRE_THROWS_WITH(input("", {B, 3}), Contains("input: the name is empty") && Contains("give each input a name") && Contains(here(__LINE__)));
  input("x", {B, 3});
  REQUIRE_THROWS_WITH(input("x", {B, 3}), Contains("input: \"x\" is already an input of this graph") && Contains("use that tensor again") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(input("y", {B, B}), Contains("has the batch dimension B twice") && Contains("give the other dimension its size") && Contains(here(__LINE__)));
}

TEST_CASE("elementwise: a fractional number beside an i32 tensor, where() of shapes that do not broadcast", "[dsl][errors]") {
  Graph g;
  GraphScope use(g);
  Tensor i = input("i", {3}, DType::i32);
  REQUIRE_THROWS_WITH(i + 0.5, Contains("add: the number 0.5 is not an integer but the other operand is i32") && Contains("cast(x, DType::f32)") && Contains(here(__LINE__)));
  Tensor a = input("a", {3}), b = input("b", {3});
  REQUIRE_THROWS_WITH(where(a > 0.0, input("c", {4}), b), Contains("where: cannot broadcast condition") && Contains("Shapes must match or broadcast") && Contains(here(__LINE__)));
}

TEST_CASE("pad: widths that are not one per axis", "[dsl][errors]") {
  Graph g;
  GraphScope use(g);
  REQUIRE_THROWS_WITH(pad(input("x", {B, 3}), {1}, {1}), Contains("pad: f32[B,3] (input) has 2 axes but got low {1} and high {1}") && Contains("give one width per axis") && Contains(here(__LINE__)));
}

TEST_CASE("nn ops: pool geometry, a filter of another rank or with the batch, logits without a class axis", "[dsl][errors]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 3, 8, 8});
  REQUIRE_THROWS_WITH(max_pool2d(x, {.kernel = 0}), Contains("max_pool2d: kernel 0, stride 0, pad 0") && Contains("need kernel >= 1") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(conv2d(x, input("w3", {4, 3, 3})), Contains("conv2d: expects a filter [O,C,KH,KW] of rank 4") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(conv2d(x, input("wb", {B, 3, 3, 3})), Contains("is the batch dimension B; only N (axis 0 of the input) may be B") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(softmax_cross_entropy(input("logits", {3, B}), input("labels", {3}, DType::i32)), Contains("need a last axis of classes with a fixed size") && Contains(here(__LINE__)));
}

TEST_CASE("grad, by_phase and add_regularization_loss: empty tensors and tensors of another graph", "[dsl][errors]") {
  Graph other;
  Tensor elsewhere;
  {
    GraphScope use(other);
    elsewhere = input("e", {3});
  }
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 3});
  Tensor loss = mean(x);
  REQUIRE_THROWS_WITH(grad(Tensor{}, {x}), Contains("grad: the loss is an empty tensor") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(grad(loss, {Tensor{}}), Contains("grad: wrt[0] is an empty tensor") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(grad(loss, {elsewhere}), Contains("belongs to another graph than the loss") && Contains("build the model and its loss in one graph") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(by_phase(x, Tensor{}), Contains("by_phase: an empty tensor") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(by_phase(elsewhere, input("y", {3})), Contains("by_phase: the training and the inference value belong to different graphs") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(add_regularization_loss(Tensor{}), Contains("add_regularization_loss: the loss is an empty tensor") && Contains("l2_loss(kernel)") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(add_regularization_loss(x), Contains("add_regularization_loss: expects an f32 scalar but got f32[B,3]") && Contains("reduce it first") && Contains(here(__LINE__)));
}

TEST_CASE("ExponentialMovingAverage of a tensor that is not a variable", "[dsl][errors]") {
  Graph g;
  GraphScope use(g);
  Tensor w = variable("w", {3});
  Tensor x = input("x", {3});
  REQUIRE_THROWS_WITH(ExponentialMovingAverage{.decay = 0.99}.apply({w, x}), Contains("ExponentialMovingAverage: can only average f32 variables of one graph, but got f32[3]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(ExponentialMovingAverage{.decay = 0.99}.apply({Tensor{}}), Contains("variable 0 is an empty tensor") && Contains(here(__LINE__)));
}

TEST_CASE("split of the batch axis", "[dsl][errors]") {
  Graph g;
  GraphScope use(g);
  REQUIRE_THROWS_WITH(split(input("x", {B, 4}), 2, 0), Contains("split: axis 0 of f32[B,4] (input) is the batch dimension; split another axis") && Contains(here(__LINE__)));
}

TEST_CASE("an integer division by zero is named at the line that divides", "[reference][errors]") {
  Graph g;
  GraphScope use(g);
  Tensor a = input("a", {3}, DType::i32), b = input("b", {3}, DType::i32);
  const int line = __LINE__ + 1;
  Tensor q = a / b;
  reference::Feeds feeds{{"a", reference::Array({3}, DType::i32)}, {"b", reference::Array({3}, DType::i32)}};
  reference::Variables none;
  REQUIRE_THROWS_WITH(reference::run(g, {q}, feeds, none), Contains("div: integer division by zero (element 0 of [3]); guard the divisor or divide in f32") && Contains(here(line)));
}

TEST_CASE("batch_norm: a momentum above 1", "[dsl][errors]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 3});
  REQUIRE_THROWS_WITH(batch_norm(x, "bn", {.momentum = 1.5}), Contains("batch_norm \"bn\": momentum 1.5 must be in [0, 1] and epsilon 0.001 positive") && Contains(here(__LINE__)));
}
