// Gradients of whole models w.r.t. every variable against finite differences, and the errors
// grad() reports.
#include "dsl/variables.h"
#include "tests/dsl/gradient_check.h"

namespace {

using namespace gradcheck;

// x @ kernel + bias with variables "<name>/kernel" and "<name>/bias".
Tensor dense_layer(Tensor x, int64_t in, int64_t out, const std::string& name) {
  VariableScope scope(name);
  Tensor w = variable("kernel", {in, out});
  Tensor b = variable("bias", {out}, {.init = init::uniform(-0.5, 0.5)});
  return matmul(x, w) + b;
}

reference::Feeds features_and_labels(const Shape& x_shape, int64_t classes, unsigned seed) {
  std::mt19937 rng(seed);
  return {{"x", draw(Arg{x_shape}, rng)},
          {"labels", draw(Arg{Shape{kBatch}, Domain::labels, false, classes}, rng)}};
}

TEST_CASE("gradient of a 2-layer MLP's loss matches finite differences", "[grad]") {
  Graph graph;
  GraphScope scope(graph);
  Tensor x = input("x", {kBatch, 6});
  Tensor labels = input("labels", {kBatch}, DType::i32);
  Tensor h = relu(dense_layer(x, 6, 8, "fc1"));
  Tensor logits = dense_layer(h, 8, 4, "fc2");
  Tensor loss = mean(softmax_cross_entropy(logits, labels)) + 1e-2 * l2_loss(trainable_variables());
  reference::Variables variables = reference::initialize_variables(graph, 7);
  const std::vector<Tensor> vars = trainable_variables();
  REQUIRE(vars.size() == 4);
  check_variables("mlp", graph, loss, vars, features_and_labels({kBatch, 6}, 4, 11), variables);
}

TEST_CASE("gradient of a small CNN's loss matches finite differences", "[grad]") {
  Graph graph;
  GraphScope scope(graph);
  Tensor x = input("x", {kBatch, 2, 6, 6});
  Tensor labels = input("labels", {kBatch}, DType::i32);
  Tensor h;
  {
    VariableScope conv("conv");
    Tensor w = variable("kernel", {3, 2, 3, 3});
    Tensor b = variable("bias", {3, 1, 1}, {.init = init::uniform(-0.5, 0.5)});
    h = max_pool2d(relu(conv2d(x, w, {.pad = 1}) + b));  // [B,3,3,3]
  }
  Tensor logits = dense_layer(reshape(h, {kBatch, 27}), 27, 5, "fc");
  Tensor loss = mean(softmax_cross_entropy(logits, labels));
  reference::Variables variables = reference::initialize_variables(graph, 3);
  check_variables("cnn", graph, loss, trainable_variables(),
                  features_and_labels({kBatch, 2, 6, 6}, 5, 5), variables);
}

TEST_CASE("grad of a non-scalar loss names grad, the shape and the caller's line", "[grad]") {
  Graph graph;
  GraphScope scope(graph);
  Tensor x = input("x", {kBatch, 10});
  Tensor y = x * 2.0;
  const std::string here = "tests/dsl/test_gradients_models.cpp:";
  REQUIRE_THROWS_WITH(grad(y, {x}), Catch::Contains("grad") && Catch::Contains("f32[B,10]") && Catch::Contains("mean() or sum()") && Catch::Contains(here + std::to_string(__LINE__)));
}

TEST_CASE("grad rejects integer tensors to differentiate", "[grad]") {
  Graph graph;
  GraphScope scope(graph);
  Tensor x = input("x", {3});
  Tensor i = input("i", {3}, DType::i32);
  REQUIRE_THROWS_WITH(grad(sum(x), {i}), Catch::Contains("grad") && Catch::Contains("i32[3]") && Catch::Contains("only f32"));
}

TEST_CASE("second derivatives of conv2d are reported, not computed", "[grad]") {
  Graph graph;
  GraphScope scope(graph);
  Tensor x = input("x", {1, 1, 4, 4});
  Tensor w = input("w", {1, 1, 3, 3});
  const int conv_line = __LINE__ + 1;
  Tensor y = conv2d(x, w);
  Tensor dw = grad(sum(y * y), {w})[0];
  const std::string conv_at = "test_gradients_models.cpp:" + std::to_string(conv_line);
  REQUIRE_THROWS_WITH(grad(sum(dw * dw), {x}), Catch::Contains("second derivatives of conv2d are not supported") && Catch::Contains(conv_at));
  // Through stop_gradient the gradient is an ordinary value again.
  CHECK_NOTHROW(grad(sum(stop_gradient(dw) * w), {w}));
}

}  // namespace
