// The shape and dtype every op infers: the batch dimension B, keepdims, negative axes,
// broadcasting, odd sizes, and conv / pool output sizes with stride and padding.
#include <catch2/catch.hpp>

#include "towerjit.h"

using namespace towerjit;

namespace {
constexpr int64_t B = kBatch;
}

TEST_CASE("elementwise ops broadcast and keep dtype", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 7});
  Tensor y = input("y", {7});
  Tensor z = input("z", {B, 1});
  CHECK((x + y).shape() == Shape{B, 7});
  CHECK((z * y).shape() == Shape{B, 7});
  CHECK((x + 1.0).shape() == Shape{B, 7});
  CHECK((2.0 * x).dtype() == DType::f32);
  Tensor labels = input("labels", {B}, DType::i32);
  CHECK((labels == 3.0).dtype() == DType::i32);
  CHECK(cast(labels, DType::f32).dtype() == DType::f32);
  CHECK(where(x > 0.0, x, 0.0).shape() == Shape{B, 7});
}

TEST_CASE("reductions drop or keep the reduced axes", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 7, 127});
  CHECK(sum(x).shape() == Shape{});
  CHECK(sum(x, {}, true).shape() == Shape{1, 1, 1});
  CHECK(sum(x, {1}).shape() == Shape{B, 127});
  CHECK(sum(x, {-1}, true).shape() == Shape{B, 7, 1});
  CHECK(mean(x, {0}).shape() == Shape{7, 127});
  CHECK(mean(x, {2, 0}, true).shape() == Shape{1, 7, 1});
  Tensor m = max(x, {-2, -1});
  CHECK(m.shape() == Shape{B});
  CHECK(m.node().op == Op::ReduceMax);
  // Axes are stored normalized: non-negative and sorted.
  CHECK(mean(x, {-1, 0}).node().attrs.axes == std::vector<int>{0, 2});
  CHECK(sum(x, {}, true).node().attrs.keepdims);
  CHECK(sum(input("i", {5}, DType::i32)).dtype() == DType::i32);
}

TEST_CASE("l2_loss is a scalar, of one tensor or a list", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor a = input("a", {3, 4});
  Tensor b = input("b", {1});
  CHECK(l2_loss(a).shape() == Shape{});
  CHECK(l2_loss(std::vector<Tensor>{a, b}).shape() == Shape{});
  CHECK(l2_loss(std::vector<Tensor>{b}).dtype() == DType::f32);
}

TEST_CASE("reshape keeps B and the element count", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 28, 28});
  CHECK(reshape(x, {B, 784}).shape() == Shape{B, 784});
  CHECK(reshape(x, {B, 1, 784, 1}).shape() == Shape{B, 1, 784, 1});
  CHECK(reshape(input("v", {7}), {7, 1}).shape() == Shape{7, 1});
  CHECK(reshape(input("s", {1}), {}).shape() == Shape{});
  CHECK(reshape(x, {B, 784}).node().op == Op::Reshape);
}

TEST_CASE("transpose permutes dimensions", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 7, 127});
  CHECK(transpose(x).shape() == Shape{127, 7, B});
  Tensor t = transpose(x, {0, 2, 1});
  CHECK(t.shape() == Shape{B, 127, 7});
  CHECK(t.node().attrs.axes == std::vector<int>{0, 2, 1});
  CHECK(transpose(x, {-1, 0, 1}).node().attrs.axes == std::vector<int>{2, 0, 1});
}

TEST_CASE("broadcast_to follows numpy rules, B only from B or 1", "[dsl]") {
  Graph g;
  GraphScope use(g);
  CHECK(broadcast_to(input("a", {7}), {B, 3, 7}).shape() == Shape{B, 3, 7});
  CHECK(broadcast_to(input("b", {1, 1}), {B, 127}).shape() == Shape{B, 127});
  CHECK(broadcast_to(input("c", {B, 1}), {B, 5}).shape() == Shape{B, 5});
}

TEST_CASE("slice and pad along each axis", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 7, 127});
  Tensor s = slice(x, {0, 2, 0}, {B, 3, 127});
  CHECK(s.shape() == Shape{B, 1, 127});
  CHECK(s.node().attrs.begin == std::vector<int64_t>{0, 2, 0});
  CHECK(s.node().attrs.end == std::vector<int64_t>{B, 3, 127});
  Tensor p = pad(x, {0, 1, 0}, {0, 2, 3});
  CHECK(p.shape() == Shape{B, 10, 130});
  CHECK(p.node().attrs.begin == std::vector<int64_t>{0, 1, 0});
  CHECK(p.node().attrs.end == std::vector<int64_t>{0, 2, 3});
}

TEST_CASE("concat adds up the axis, split undoes it", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor a = input("a", {B, 3});
  Tensor b = input("b", {B, 4});
  Tensor c = concat({a, b}, -1);
  CHECK(c.shape() == Shape{B, 7});
  CHECK(c.node().attrs.axis == 1);
  CHECK(concat({a}, 1).id() == a.id());

  auto parts = split(c, std::vector<int64_t>{3, 4}, -1);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].shape() == Shape{B, 3});
  CHECK(parts[1].shape() == Shape{B, 4});
  CHECK(parts[1].node().attrs.begin == std::vector<int64_t>{0, 3});

  auto thirds = split(input("x", {2, 127 * 3}), 3, 1);
  REQUIRE(thirds.size() == 3);
  for (const Tensor& t : thirds) CHECK(t.shape() == Shape{2, 127});
}

TEST_CASE("matmul shapes, 2-D and batched", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 784});
  Tensor w = input("w", {784, 10});
  CHECK(matmul(x, w).shape() == Shape{B, 10});
  CHECK(matmul(input("a", {5, 1, 2, 7}), input("b", {3, 7, 127})).shape() ==
        Shape{5, 3, 2, 127});
  CHECK(matmul(input("c", {4, 2, 7}), input("d", {7, 1})).shape() == Shape{4, 2, 1});
  // The weight gradient contracts over the batch: [784,B] x [B,10].
  CHECK(matmul(transpose(x), input("dy", {B, 10})).shape() == Shape{784, 10});
}

TEST_CASE("one_hot, argmax and the softmax family", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor labels = input("labels", {B}, DType::i32);
  Tensor oh = one_hot(labels, 10);
  CHECK(oh.shape() == Shape{B, 10});
  CHECK(oh.dtype() == DType::f32);
  CHECK(oh.node().attrs.depth == 10);

  Tensor logits = input("logits", {B, 7, 10});
  Tensor am = argmax(logits, -2);
  CHECK(am.shape() == Shape{B, 10});
  CHECK(am.dtype() == DType::i32);
  CHECK(am.node().attrs.axis == 1);

  CHECK(softmax(logits).shape() == Shape{B, 7, 10});
  CHECK(log_softmax(logits, 1).shape() == Shape{B, 7, 10});
  Tensor flat = input("flat", {B, 10});
  CHECK(softmax_cross_entropy(flat, labels).shape() == Shape{B});
  CHECK(softmax_cross_entropy(flat, softmax(flat)).shape() == Shape{B});
  CHECK(softmax_cross_entropy(logits, input("l2", {B, 7}, DType::i32)).shape() == Shape{B, 7});
}

TEST_CASE("softmax is one fused node over the last axis, else exp(x - logsumexp(x)) over its axis", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 10});
  const Tensor fused = softmax(x, -1);
  CHECK(g.node(fused.id()).op == Op::Softmax);
  CHECK(g.node(softmax(x, 1).id()).op == Op::Softmax);
  const int before = g.size();
  softmax(x, {.fused = false});
  softmax(x, 0);  // not the last axis: composed whatever fused says
  int lse = 0;
  for (int id = before; id < g.size(); ++id) {
    const Node& n = g.node(id);
    CHECK(n.op != Op::Softmax);
    if (n.op == Op::ReduceLogSumExp) {
      CHECK(n.attrs.axes == std::vector<int>{lse == 0 ? 1 : 0});
      CHECK(n.attrs.keepdims);
      ++lse;
    }
  }
  CHECK(lse == 2);
}

TEST_CASE("conv2d output sizes with stride and padding", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 3, 28, 28});
  Tensor y = conv2d(x, input("w", {16, 3, 5, 5}));
  CHECK(y.shape() == Shape{B, 16, 24, 24});
  CHECK(y.node().attrs.kernel[0] == 5);
  CHECK(y.node().attrs.kernel[1] == 5);
  CHECK(conv2d(x, input("w2", {8, 3, 3, 3}), {.stride = 2, .pad = 1}).shape() ==
        Shape{B, 8, 14, 14});
  Tensor odd = conv2d(input("o", {1, 1, 7, 127}), input("k", {1, 1, 3, 1}), {.stride = 2});
  CHECK(odd.shape() == Shape{1, 1, 3, 64});
  CHECK(odd.node().attrs.stride[0] == 2);
  CHECK(odd.node().attrs.stride[1] == 2);
  CHECK(odd.node().attrs.kernel[1] == 1);
}

TEST_CASE("pool output sizes, stride 0 means the kernel", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 16, 28, 28});
  Tensor p = max_pool2d(x);
  CHECK(p.shape() == Shape{B, 16, 14, 14});
  CHECK(p.node().attrs.stride[0] == 2);
  CHECK(max_pool2d(x, {.kernel = 3, .stride = 2, .pad = 1}).shape() == Shape{B, 16, 14, 14});
  Tensor a = avg_pool2d(input("o", {2, 1, 7, 127}), {.kernel = 3});
  CHECK(a.shape() == Shape{2, 1, 2, 42});
  CHECK(a.node().op == Op::AvgPool2D);
  CHECK(a.node().attrs.kernel[1] == 3);
}

TEST_CASE("random_uniform_like and assign", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {B, 127});
  Tensor r = random_uniform_like(x, 42);
  CHECK(r.shape() == Shape{B, 127});
  CHECK(r.dtype() == DType::f32);
  CHECK(r.node().attrs.seed == 42);
  CHECK(r.node().inputs == std::vector<int>{x.id()});

  Tensor v = variable("v", {7});
  Tensor a = assign(v, v * 0.5);
  CHECK(a.shape() == Shape{7});
  CHECK(a.node().inputs[0] == v.id());
  REQUIRE(g.update_ops.size() == 1);
  CHECK(g.update_ops[0] == a.id());
}
