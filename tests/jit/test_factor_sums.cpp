// Factors that do not vary along a sum's axes taken out of it (jit/passes/factor_sums.h): what
// the pass rewrites and what it leaves, the backward of a batch norm written with two-pass
// statistics it takes from three passes over its tensors to two, and the results against the
// reference at odd sizes, on one thread and on the pool.
#include <catch2/catch.hpp>

#include <algorithm>

#include "epilogue_cases.h"
#include "jit/passes/factor_sums.h"
#include "runtime/thread_pool.h"
#include "tests/jit/cpu_test_env.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Op;
using tj::Tensor;
using namespace tj::testing;

namespace {

// Every loop kernel of the program whose loop space is `space` and that reduces.
int reductions_over(const tj::kir::Program& p, const tj::Shape& space) {
  int n = 0;
  for (const tj::kir::Kernel& k : p.kernels) n += k.space == space && !k.reduce_axes.empty();
  return n;
}

// Batch norm over NCHW written out with two-pass statistics (the mean, then the mean square of
// x - mean), as a user composes it; the layer's own takes one pass (dsl/layers.cpp).
Tensor two_pass_batch_norm(const Tensor& x) {
  const std::vector<int> axes{0, 2, 3};
  const tj::Shape channel{1, x.shape()[1], 1, 1};
  const Tensor gamma = tj::reshape(tj::variable("gamma", {x.shape()[1]}, {.init = tj::init::constant(1.5)}), channel);
  const Tensor beta = tj::reshape(tj::variable("beta", {x.shape()[1]}, {.init = tj::init::constant(0.25)}), channel);
  const Tensor centred = x - tj::mean(x, axes, true);
  const Tensor inv = tj::rsqrt(tj::mean(centred * centred, axes, true) + 1e-3);
  return gamma * centred * inv + beta;
}

// A batch norm, ReLU after, weighed by `w` into a scalar loss: the gradients of x, gamma and
// beta. `layer`: the batch_norm layer, else two_pass_batch_norm.
std::vector<Tensor> batch_norm_backward(const tj::Shape& shape, bool layer = true) {
  const Tensor x = tj::input("x", shape), w = tj::input("w", shape);
  const Tensor y = layer ? tj::batch_norm(x, /*training=*/true, "bn") : two_pass_batch_norm(x);
  const Tensor loss = tj::sum(tj::relu(y) * w);
  std::vector<Tensor> wrt = tj::trainable_variables();
  wrt.push_back(x);
  return tj::grad(loss, wrt);
}

}  // namespace

TEST_CASE("factor sums: a two-pass batch norm's backward reads its tensors in two passes, not three", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const std::vector<Tensor> grads = batch_norm_backward({kBatch, 3, 5, 7}, /*layer=*/false);
  const tj::Shape space{kBatch, 3, 5, 7};
  const tj::kir::Program factored = lower(g, grads);
  tj::test::ScopedEnv off("TOWERJIT_FACTOR_SUMS", "off");
  const tj::kir::Program as_written = lower(g, grads);
  // As written: the forward's mean and variance, then the backward's three sums, and the sum
  // that waits for them. Factored, that last sum's pieces are sums the pass before already makes
  // (and sum(x - mean), one more sibling there).
  INFO("as written:\n" << tj::kir::to_string(as_written) << "\nfactored:\n" << tj::kir::to_string(factored));
  CHECK(reductions_over(as_written, space) == 4);
  CHECK(reductions_over(factored, space) == 3);
  CHECK(kernel_steps(factored) <= kernel_steps(as_written));
}

TEST_CASE("factor sums: batch norm's gradients match the reference at odd sizes, on one thread and on the pool",
          "[cpu][jit]") {
  tj::ThreadPool threads(2);
  uint32_t seed = 40;
  for (const tj::Shape& shape : {tj::Shape{kBatch, 1, 1, 1}, tj::Shape{kBatch, 3, 5, 7}, tj::Shape{kBatch, 16, 7, 1},
                                 tj::Shape{kBatch, 7}})
    for (int64_t batch : {1, 7, 127})
      for (bool layer : {true, false}) {
        if (batch == 1 && shape.rank() == 2) continue;  // one example of one point a channel: variance 0
        if (!layer && shape.rank() != 4) continue;
        const std::string what = shape.str() + " at batch " + std::to_string(batch) + (layer ? ", the layer" : ", two passes");
        INFO(what);
        tj::Graph g;
        tj::GraphScope use(g);
        const std::vector<Tensor> grads = batch_norm_backward(shape, layer);
        const tj::Shape bound = shape.bind(batch);
        tj::reference::Feeds feeds{{"x", random_array(bound, seed += 2, -3, 5)}, {"w", random_array(bound, seed + 1)}};
        tj::reference::Variables vars = tj::reference::initialize_variables(g, seed);
        require_close(run_both(g, grads, feeds, vars), what + " on one thread");
        require_close(run_both(g, grads, feeds, vars, false, &threads), what + " on the pool");
      }
}

TEST_CASE("factor sums: what the pass takes apart and what it leaves as written", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 4, 3}), y = tj::input("y", {kBatch, 4, 3});
  const Tensor c = tj::input("c", {1, 4, 1}), d = tj::input("d", {4, 1});  // constant along axes 0 and 2
  const Tensor per_example = tj::input("e", {kBatch, 1, 1});               // varies along axis 0
  struct Case {
    const char* name;
    Tensor sum;
    bool rewritten;
  };
  const std::vector<Case> cases{
      {"sum(x * c) keepdims", tj::sum(x * c, {0, 2}, true), true},
      {"mean(c * x - y * d) keepdims", tj::mean(c * x - y * d, {0, 2}, true), true},
      {"sum(-(x * broadcast c) + y) without keepdims", tj::sum(-(x * tj::broadcast_to(c, {kBatch, 4, 3})) + y, {0, 2}), true},
      {"sum(x * e): e varies along axis 0", tj::sum(x * per_example, {0, 2}, true), false},
      {"sum(x * y): nothing to take out", tj::sum(x * y, {0, 2}, true), false},
      {"sum(x * c + broadcast c * broadcast d): a term with nothing that varies",
       tj::sum(x * c + tj::broadcast_to(c, {kBatch, 4, 3}) * tj::broadcast_to(d, {kBatch, 4, 3}), {0, 2}, true), false},
      {"sum(x * c) over axis 1, along which c varies", tj::sum(x * c, {1}, true), false},
  };
  for (const Case& k : cases) {
    INFO(k.name);
    // The pass alone: a rewritten sum is no longer the node that computes the value.
    const tj::Rewritten r = tj::factor_sums(g);
    const tj::Node& now = r.graph.node(r.remap[k.sum.id()]);
    const bool still_the_sum = (now.op == Op::ReduceSum || now.op == Op::ReduceMean) &&
                               now.inputs[0] == r.remap[g.node(k.sum.id()).inputs[0]];
    CHECK(still_the_sum == !k.rewritten);
    // Through the whole pipeline, against the reference.
    uint32_t seed = 70;
    for (int64_t batch : {1, 7}) {
      tj::reference::Feeds feeds{{"x", random_array({batch, 4, 3}, seed++, -2, 3)},
                                 {"y", random_array({batch, 4, 3}, seed++)},
                                 {"c", random_array({1, 4, 1}, seed++, -4, 4)},
                                 {"d", random_array({4, 1}, seed++)},
                                 {"e", random_array({batch, 1, 1}, seed++)}};
      require_jit_matches(g, {k.sum}, feeds, {}, std::string(k.name) + " at batch " + std::to_string(batch));
    }
  }
}

TEST_CASE("batch norm's layer reads its input once for its statistics: two reductions over the tensor with its backward",
          "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const std::vector<Tensor> grads = batch_norm_backward({kBatch, 3, 5, 7});
  const tj::kir::Program p = lower(g, grads);
  INFO(tj::kir::to_string(p));
  // The forward's mean and mean square of x - s as siblings, the backward's sums as siblings.
  CHECK(reductions_over(p, {kBatch, 3, 5, 7}) == 2);
}
