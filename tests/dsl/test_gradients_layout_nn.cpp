// Gradients of the layout ops, matmul, the softmax family, convolution and pooling against
// central finite differences.
#include "tests/dsl/gradient_check.h"

namespace {

using namespace gradcheck;
using D = Domain;
using Xs = std::vector<Tensor>;

TEST_CASE("gradients of reshape, transpose and broadcast_to match finite differences",
          "[grad]") {
  check_op("reshape [2,3,4] -> [6,4]", {{Shape{2, 3, 4}}},
           [](const Xs& x) { return reshape(x[0], {6, 4}); });
  check_op("reshape [B,3,4] -> [B,12]", {{Shape{kBatch, 3, 4}}},
           [](const Xs& x) { return reshape(x[0], {kBatch, 12}); });
  check_op("transpose [2,3,4] {2,0,1}", {{Shape{2, 3, 4}}},
           [](const Xs& x) { return transpose(x[0], {2, 0, 1}); });
  check_op("transpose [B,3,4] reversed", {{Shape{kBatch, 3, 4}}},
           [](const Xs& x) { return transpose(x[0]); });
  check_op("broadcast_to [3,1] -> [2,3,4]", {{Shape{3, 1}}},
           [](const Xs& x) { return broadcast_to(x[0], {2, 3, 4}); });
  check_op("broadcast_to [1,3] -> [B,3]", {{Shape{1, 3}}, {Shape{kBatch, 1}, D::any, false}},
           // The second input only fixes the batch size.
           [](const Xs& x) { return broadcast_to(x[0], {kBatch, 3}) * x[1]; });
}

TEST_CASE("gradients of slice, pad, concat and split match finite differences", "[grad]") {
  check_op("slice [5,6]", {{Shape{5, 6}}},
           [](const Xs& x) { return slice(x[0], {1, 2}, {4, 5}); });
  check_op("slice [B,6]", {{Shape{kBatch, 6}}},
           [](const Xs& x) { return slice(x[0], {0, 1}, {kBatch, 4}); });
  check_op("pad [3,4]", {{Shape{3, 4}}}, [](const Xs& x) { return pad(x[0], {1, 0}, {2, 3}); });
  check_op("pad [B,4]", {{Shape{kBatch, 4}}},
           [](const Xs& x) { return pad(x[0], {0, 2}, {0, 1}); });
  check_op("concat axis 1", {{Shape{2, 1}}, {Shape{2, 3}}, {Shape{2, 2}}},
           [](const Xs& x) { return concat({x[0], x[1], x[2]}, 1); });
  check_op("concat [B,..] axis -1, one input twice", {{Shape{kBatch, 2}}, {Shape{kBatch, 3}}},
           [](const Xs& x) { return concat({x[0], x[1], x[0]}, -1); });
  check_op("split sizes", {{Shape{3, 6}}}, [](const Xs& x) {
    std::vector<Tensor> p = split(x[0], std::vector<int64_t>{1, 3, 2}, 1);
    return concat({p[2], p[0] * p[0], p[1]}, 1);
  });
  check_op("split parts [B,4]", {{Shape{kBatch, 4}}}, [](const Xs& x) {
    std::vector<Tensor> p = split(x[0], 2, 1);
    return p[0] * p[1];
  });
}

TEST_CASE("gradients of matmul match finite differences", "[grad]") {
  const std::pair<Shape, Shape> shapes[] = {
      {{3, 4}, {4, 5}},          // 2-D
      {{kBatch, 4}, {4, 5}},     // a dense layer: the weight gradient contracts over B
      {{2, 3, 4}, {2, 4, 5}},    // batched
      {{2, 1, 3, 4}, {3, 4, 2}}, // batch dimensions broadcast both ways
      {{kBatch, 3, 4}, {4, 2}},  // a 2-D right operand shared over the batch
  };
  for (const auto& [sa, sb] : shapes)
    check_op("matmul " + sa.str() + " x " + sb.str(), {{sa}, {sb}},
             [](const Xs& x) { return matmul(x[0], x[1]); });
}

TEST_CASE("gradients of softmax, log_softmax and cross-entropy match finite differences",
          "[grad]") {
  check_op("softmax [B,5]", {{Shape{kBatch, 5}}}, [](const Xs& x) { return softmax(x[0]); });
  check_op("softmax [B,5], composed", {{Shape{kBatch, 5}}},
           [](const Xs& x) { return softmax(x[0], {.fused = false}); });
  check_op("softmax [4,3] axis 0", {{Shape{4, 3}}},
           [](const Xs& x) { return softmax(x[0], 0); });
  // The fused softmax's gradient op differentiated in turn, through both of its inputs: the
  // output y and the incoming gradient 2 y.
  check_op("second derivatives of the fused softmax [B,6]", {{Shape{kBatch, 6}}}, [](const Xs& x) {
    Tensor y = softmax(x[0]);
    return grad(sum(y * y), {x[0]})[0];
  });
  check_op("log_softmax [B,5]", {{Shape{kBatch, 5}}},
           [](const Xs& x) { return log_softmax(x[0]); });
  check_op("log_softmax [2,3,4] axis 1", {{Shape{2, 3, 4}}},
           [](const Xs& x) { return log_softmax(x[0], 1); });
  Arg labels{Shape{kBatch}, D::labels, false, 5};
  check_op("softmax_cross_entropy, i32 labels", {{Shape{kBatch, 5}}, labels},
           [](const Xs& x) { return softmax_cross_entropy(x[0], x[1]); });
  Arg soft{Shape{kBatch, 5}, D::probabilities, false};
  check_op("softmax_cross_entropy, soft labels", {{Shape{kBatch, 5}}, soft},
           [](const Xs& x) { return softmax_cross_entropy(x[0], x[1]); });
  check_op("l2_loss", {{Shape{3, 4}}}, [](const Xs& x) { return l2_loss(x[0]); });
}

TEST_CASE("gradients of conv2d match finite differences", "[grad][isa]") {
  check_op("conv2d stride 2 pad 1", {{Shape{2, 3, 7, 7}}, {Shape{4, 3, 3, 3}}},
           [](const Xs& x) { return conv2d(x[0], x[1], {.stride = 2, .pad = 1}); });
  check_op("conv2d [B,2,5,6] 2x3 filter", {{Shape{kBatch, 2, 5, 6}}, {Shape{3, 2, 2, 3}}},
           [](const Xs& x) { return conv2d(x[0], x[1]); });
  // (9 + 4 - 3) / 3 leaves a row over: the input's last row feeds no output.
  check_op("conv2d stride 3 pad 2, a row left over", {{Shape{1, 2, 9, 8}}, {Shape{2, 2, 3, 2}}},
           [](const Xs& x) { return conv2d(x[0], x[1], {.stride = 3, .pad = 2}); });
}

TEST_CASE("gradients of max and average pooling match finite differences", "[grad][isa]") {
  using Pool = Tensor (*)(Tensor, Pool2DOptions, Loc);
  const std::pair<const char*, Pool> pools[] = {{"max_pool2d", max_pool2d},
                                                {"avg_pool2d", avg_pool2d}};
  for (const auto& [name, pool] : pools) {
    check_op(std::string(name) + " 2x2", {{Shape{2, 3, 6, 6}}},
             [&](const Xs& x) { return pool(x[0], {}, Loc::current()); });
    check_op(std::string(name) + " kernel 3 stride 2 pad 1", {{Shape{kBatch, 2, 7, 7}}},
             [&](const Xs& x) { return pool(x[0], {.kernel = 3, .stride = 2, .pad = 1},
                                            Loc::current()); });
    check_op(std::string(name) + " overlapping, stride 1", {{Shape{1, 1, 5, 4}}},
             [&](const Xs& x) { return pool(x[0], {.kernel = 2, .stride = 1}, Loc::current()); });
  }
}

}  // namespace
