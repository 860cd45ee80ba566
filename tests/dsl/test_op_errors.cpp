// Each expected failure is a test: the message names the op, the shapes or values involved,
// and the line of this file that made the mistake.
#include <catch2/catch.hpp>

#include "towerjit.h"

using namespace towerjit;
using Catch::Contains;

namespace {
constexpr int64_t B = kBatch;

// Where a call on line `line` of this file is reported; pass __LINE__ on the call's own line.
std::string here(int line) { return "tests/dsl/test_op_errors.cpp:" + std::to_string(line); }
}  // namespace

TEST_CASE("add: shape mismatch names both shapes and the line", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor a = input("a", {32, 128});
  Tensor b = input("b", {32, 64});
  REQUIRE_THROWS_WITH(a + b, Contains("cannot add tensors of shape [32,128] and [32,64]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(add(a, b), Contains("Shapes must match or broadcast") && Contains(here(__LINE__)));
  Tensor x = input("x", {B, 3});
  REQUIRE_THROWS_WITH(x * input("y", {4}), Contains("cannot mul tensors of shape [B,3] and [4]") && Contains(here(__LINE__)));
}

// Found by the graph fuzz target (fuzz/regressions/graph_builder/batch-twice-by-broadcast): the
// result of a broadcast held B twice and only the CPU lowering noticed, as an internal error.
TEST_CASE("broadcasting B against B in another place is an error naming both operands", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor row = input("row", {1, B}), column = input("column", {B, 1});
  REQUIRE_THROWS_WITH(row / column, Contains("div: the result [B,B] of operands [1,B] and [B,1] holds the batch dimension B twice") && Contains("line B up") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(where(row > 0, row, column), Contains("where: the result [B,B]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(matmul(input("a", {B, 2, 3}), input("b", {3, B})), Contains("holds the batch dimension B twice"));
  CHECK((row * input("same", {1, B})).shape() == Shape{1, B});  // B in the same place is fine
}

TEST_CASE("add: dtype mismatch", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor f = input("f", {3});
  Tensor i = input("i", {3}, DType::i32);
  REQUIRE_THROWS_WITH(f + i, Contains("add: dtype mismatch") && Contains("f32[3]") && Contains("i32[3]") && Contains("cast()") && Contains(here(__LINE__)));
}

TEST_CASE("reductions: axis out of range", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 3});
  REQUIRE_THROWS_WITH(sum(x, {5}), Contains("sum: axis 5 is out of range for f32[B,3]") && Contains("-2 to 1") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(max(x, {-3}), Contains("max: axis -3") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(mean(x, {1, -1}), Contains("mean: axis -1 is listed twice") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(mean(input("i", {3}, DType::i32)), Contains("mean: expects f32") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(argmax(x, 2), Contains("argmax: axis 2 is out of range") && Contains(here(__LINE__)));
}

TEST_CASE("l2_loss of an empty list", "[dsl]") {
  Graph g;
  GraphScope use(g);
  REQUIRE_THROWS_WITH(l2_loss(std::vector<Tensor>{}), Contains("l2_loss: the list of tensors is empty") && Contains(here(__LINE__)));
}

TEST_CASE("matmul: inner dimensions differ", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 784});
  Tensor w = input("w", {512, 10});
  REQUIRE_THROWS_WITH(matmul(x, w), Contains("matmul: inner dimensions differ: f32[B,784] x f32[512,10] (784 vs 512)") && Contains("did you mean a right operand of shape [784,10]?") && Contains(here(__LINE__)));
  Tensor wt = input("wt", {10, 784});
  REQUIRE_THROWS_WITH(matmul(x, wt), Contains("did you mean matmul(a, transpose(b))?") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(matmul(input("v", {784}), w), Contains("matmul: expects operands of rank 2") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(matmul(input("a", {2, 3, 4}), input("b", {5, 4, 6})), Contains("batch dimensions [2] and [5]") && Contains(here(__LINE__)));
}

TEST_CASE("reshape: element count and batch", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 784});
  REQUIRE_THROWS_WITH(reshape(x, {B, 28, 27}), Contains("reshape: cannot reshape f32[B,784]") && Contains("[B,28,27]") && Contains("784 vs 756") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(reshape(x, {784}), Contains("batch dimension B must stay a dimension of its own") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(reshape(input("y", {4, 10}), {B, 10}), Contains("reshape: cannot reshape f32[4,10]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(reshape(x, {B, 0}), Contains("reshape: dimension 0 in [B,0]") && Contains(here(__LINE__)));
}

TEST_CASE("transpose: not a permutation", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 3, 4});
  REQUIRE_THROWS_WITH(transpose(x, {0, 0, 1}), Contains("transpose: {0,0,1} is not a permutation of the 3 axes of f32[B,3,4]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(transpose(x, {1, 0}), Contains("not a permutation") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(transpose(x, {0, 1, 3}), Contains("{0,1,3}") && Contains(here(__LINE__)));
}

TEST_CASE("broadcast_to, slice, pad: bad shapes and ranges", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 7});
  REQUIRE_THROWS_WITH(broadcast_to(input("a", {3}), {B, 5}), Contains("broadcast_to: cannot broadcast f32[3]") && Contains("[B,5]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(broadcast_to(x, {4, 7}), Contains("axis 0 is B but the target's is 4") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(slice(x, {0, 3}, {B, 8}), Contains("slice: axis 1 of f32[B,7] (input): [3, 8)") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(slice(x, {0, 2}, {B, 2}), Contains("need 0 <= begin < end <= 7") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(slice(x, {0, 0}, {4, 7}), Contains("is the batch dimension and must be taken whole") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(slice(x, {0}, {B}), Contains("slice: f32[B,7] (input) has 2 axes") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(pad(x, {0, -1}, {0, 0}), Contains("pad: axis 1") && Contains("must be non-negative") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(pad(x, {1, 0}, {0, 0}), Contains("batch dimension and cannot be padded") && Contains(here(__LINE__)));
}

TEST_CASE("concat and split: mismatches", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor a = input("a", {B, 3});
  Tensor b = input("b", {B, 4, 1});
  Tensor c = input("c", {5, 4});
  REQUIRE_THROWS_WITH(concat({a, b}, 1), Contains("concat: cannot concatenate f32[B,3] (input) and f32[B,4,1] (input)") && Contains("ranks differ; make them equal with reshape()") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(concat({a, c}, 1), Contains("axis 0 differs (B vs 5)") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(concat({a, input("i", {B, 3}, DType::i32)}, 1), Contains("dtypes differ") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(concat({a, a}, 0), Contains("concat: axis 0 of f32[B,3] (input)") && Contains("is the batch dimension") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(concat({}, 0), Contains("concat: the list of tensors is empty") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(split(c, 3, 1), Contains("split: axis 1 of f32[5,4] (input) has size 4, which does not divide into 3 equal parts") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(split(c, std::vector<int64_t>{1, 2}, -1), Contains("split: sizes {1,2} add up to 3 but axis 1") && Contains(here(__LINE__)));
}

TEST_CASE("conv2d and pools: channels and windows", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 3, 28, 28});
  REQUIRE_THROWS_WITH(conv2d(x, input("w", {16, 1, 5, 5})), Contains("conv2d: channels differ: input f32[B,3,28,28] (input) has C = 3") && Contains("f32[16,1,5,5]") && Contains("[O,3,KH,KW]") && Contains(here(__LINE__)));
  Tensor w = input("w2", {16, 3, 5, 5});
  REQUIRE_THROWS_WITH(conv2d(input("small", {B, 3, 4, 28}), w), Contains("conv2d: the 5-wide window does not fit H = 4") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(conv2d(x, w, {.stride = 0}), Contains("conv2d: stride 0 and pad 0") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(conv2d(input("flat", {B, 784}), w), Contains("conv2d: expects an NCHW input of rank 4 but got f32[B,784]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(max_pool2d(input("v", {B, 28}), {}), Contains("max_pool2d: expects an NCHW input") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(avg_pool2d(x, {.kernel = 2, .pad = 2}), Contains("avg_pool2d: pad 2 is more than half the kernel 2") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(max_pool2d(input("tiny", {B, 1, 1, 1}), {.kernel = 2}), Contains("max_pool2d: the 2-wide window does not fit H = 1") && Contains(here(__LINE__)));
}

TEST_CASE("one_hot and softmax_cross_entropy: labels", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor logits = input("logits", {B, 10});
  Tensor bad = input("bad", {B, 1}, DType::i32);
  REQUIRE_THROWS_WITH(softmax_cross_entropy(logits, bad), Contains("softmax_cross_entropy: labels i32[B,1] (input) do not fit logits f32[B,10] (input)") && Contains("reshape the labels to [B]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(softmax_cross_entropy(logits, input("p", {B, 9})), Contains("labels f32[B,9]") && Contains("f32 probabilities shape [B,10]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(one_hot(logits, 10), Contains("one_hot: expects i32 class indices but got f32[B,10]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(one_hot(input("l", {B}, DType::i32), 0), Contains("one_hot: depth 0") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(softmax(input("ints", {B, 10}, DType::i32)), Contains("softmax: expects f32 but got i32[B,10]") && Contains(here(__LINE__)));
}

TEST_CASE("assign: to a non-variable, or a value of another shape", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor v = variable("v", {3});
  Tensor x = input("x", {3});
  REQUIRE_THROWS_WITH(assign(v * 2.0, x), Contains("assign: the target must be a variable but got f32[3] (mul)") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(assign(v, input("y", {1, 3})), Contains("assign: cannot assign f32[1,3] (input) to variable \"v\" of f32[3]") && Contains(here(__LINE__)));
  CHECK(g.update_ops.empty());
}

TEST_CASE("operands from different graphs", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor a = input("a", {3});
  Graph other;
  Tensor b;
  {
    GraphScope use_other(other);
    b = input("b", {3});
  }
  REQUIRE_THROWS_WITH(a + b, Contains("add: operands belong to different graphs") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(matmul(input("m", {3, 3}), reshape(b, {3, 1})), Contains("matmul: operands belong to different graphs") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(concat({a, b}, 0), Contains("concat: operands belong to different graphs") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(relu(Tensor()), Contains("relu: an operand is an empty tensor") && Contains(here(__LINE__)));
}

TEST_CASE("a message names the scope it was built in", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor a = input("a", {32, 128});
  Tensor b = input("b", {32, 64});
  VariableScope s("encoder");
  REQUIRE_THROWS_WITH(a + b, Contains("cannot add tensors of shape [32,128] and [32,64] in \"encoder\"") && Contains(here(__LINE__)));
  VariableScope inner("fc2");
  REQUIRE_THROWS_WITH(matmul(a, b), Contains("(128 vs 32) in \"encoder/fc2\"") && Contains(here(__LINE__)));
}
