// Stored values computed again by a kernel that loads their body's buffer anyway
// (FusionPlan::recompute_source, jit/passes/fusion_plan.h): batch norm's ReLU output, kept for
// the next convolution, is recomputed from the convolution's output by the backward's kernels
// that read that output for x - mean. What the kernels load, with the rule and without
// (TOWERJIT_RECOMPUTE_IN_READERS=off), and the results: the reference's within its bound either
// way, at odd sizes, with many pre-activations exactly zero, and in a step that applies its
// optimiser in place.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "epilogue_cases.h"
#include "jit/kir/traffic.h"
#include "runtime/thread_pool.h"
#include "tests/jit/cpu_test_env.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

// conv -> batch norm -> ReLU -> conv, squared and weighed by `w` into a scalar loss: the
// gradients of the variables and of x. The ReLU output has a buffer because the second
// convolution reads it.
std::vector<Tensor> conv_bn_relu_conv(const tj::Shape& x_shape, int64_t filters) {
  const Tensor x = tj::input("x", x_shape);
  const Tensor c = tj::conv2d(x, filters, 3, "conv1", {.pad = 1, .use_bias = false});
  const Tensor a = tj::relu(tj::batch_norm(c, /*training=*/true, "bn"));
  const Tensor y = tj::conv2d(a, 2, 3, "conv2", {.pad = 1, .use_bias = false});
  const Tensor w = tj::input("w", y.shape());
  std::vector<Tensor> wrt = tj::trainable_variables();
  wrt.push_back(x);
  return tj::grad(tj::sum(y * y * w), wrt);
}

// The buffers of the first convolution's output and of the ReLU output (the second
// convolution's input), found by the calls that write and read them.
struct Buffers {
  int conv = -1, relu = -1;
};
Buffers conv_and_relu(const tj::kir::Program& p) {
  Buffers b;
  for (const tj::kir::LibraryCall& c : p.calls) {
    if (c.op != tj::Op::Conv2D) continue;
    if (b.conv < 0) b.conv = c.output;
    else if (b.relu < 0) b.relu = c.inputs[0];
  }
  REQUIRE(b.conv >= 0);
  REQUIRE(b.relu >= 0);
  return b;
}

// Loop kernels that load both the convolution's output and the ReLU's.
int kernels_loading_both(const tj::kir::Program& p) {
  const Buffers b = conv_and_relu(p);
  int n = 0;
  for (const tj::kir::Kernel& k : p.kernels) {
    const std::set<int> l = tj::kir::loaded_buffers(k);
    n += l.count(b.conv) && l.count(b.relu);
  }
  return n;
}

// Integers in [-2, 2]: a channel's values tie with its mean often, so batch norm's
// pre-activation is exactly zero at many points, where the ReLU's mask is most fragile.
tj::reference::Array small_integers(const tj::Shape& shape, uint32_t seed) {
  tj::reference::Array a = random_array(shape, seed, -2.5, 2.5);
  for (double& v : a.data) v = std::round(v);
  return a;
}

}  // namespace

TEST_CASE("recompute in readers: batch norm's backward recomputes the ReLU output from the convolution's", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const std::vector<Tensor> grads = conv_bn_relu_conv({kBatch, 3, 6, 5}, 4);
  const tj::kir::Program recomputed = lower(g, grads);
  tj::test::ScopedEnv off("TOWERJIT_RECOMPUTE_IN_READERS", "off");
  const tj::kir::Program loaded = lower(g, grads);
  INFO("loaded:\n" << tj::kir::to_string(loaded) << "\nrecomputed:\n" << tj::kir::to_string(recomputed));
  // Loaded: the backward's sums and its normalisation read the ReLU output for the mask beside
  // the convolution's output for x - mean. Recomputed, neither reads the ReLU output.
  CHECK(kernels_loading_both(loaded) == 2);
  CHECK(kernels_loading_both(recomputed) == 0);
  CHECK(kernel_steps(recomputed) == kernel_steps(loaded));
  // The second convolution and its filter gradient still read the stored ReLU output.
  const int relu = conv_and_relu(recomputed).relu;
  int library_reads = 0;
  for (const tj::kir::LibraryCall& c : recomputed.calls)
    library_reads += std::count(c.inputs.begin(), c.inputs.end(), relu);
  CHECK(library_reads == 2);
}

TEST_CASE("recompute in readers: the reference's gradients at odd sizes, pre-activations at zero and shifted",
          "[cpu][jit]") {
  tj::ThreadPool threads(2);
  uint32_t seed = 70;
  for (const tj::Shape& shape : {tj::Shape{kBatch, 1, 1, 1}, tj::Shape{kBatch, 3, 7, 5}, tj::Shape{kBatch, 2, 1, 9}})
    for (int64_t batch : {1, 7, 127})
      for (bool shifted : {false, true}) {
        const std::string what = shape.str() + " at batch " + std::to_string(batch) + (shifted ? ", shifted" : "");
        INFO(what);
        tj::Graph g;
        tj::GraphScope use(g);
        const std::vector<Tensor> grads = conv_bn_relu_conv(shape, 3);
        const tj::Shape x = shape.bind(batch), y = tj::Shape{kBatch, 2, shape[2], shape[3]}.bind(batch);
        tj::reference::Feeds feeds{{"x", small_integers(x, seed += 2)}, {"w", random_array(y, seed + 1)}};
        tj::reference::Variables vars = tj::reference::initialize_variables(g, seed);
        // Unshifted, gamma 1 and beta 0: a point equal to its channel's mean is exactly zero
        // before the ReLU. Shifted, gamma of either sign and beta in [-1, 1).
        if (shifted) {
          vars["bn/gamma"] = random_array({3}, seed + 5, -2, 2);
          vars["bn/beta"] = random_array({3}, seed + 6);
        }
        for (const char* knob : {"on", "off"}) {
          tj::test::ScopedEnv recompute("TOWERJIT_RECOMPUTE_IN_READERS", knob);
          require_close(run_both(g, grads, feeds, vars, false, &threads), what + ", recompute " + knob);
        }
      }
}

TEST_CASE("recompute in readers: a step that applies momentum in place reads gamma and beta before their update",
          "[cpu][jit]") {
  // Batch norm's gamma and beta are in the recomputed body, and the optimiser writes them in
  // place at the step's end: the backward's kernels, which run before, still recompute, and the
  // step's variables match the reference's.
  tj::ThreadPool threads(2);
  uint32_t seed = 90;
  for (int64_t batch : {1, 7}) {
    INFO("batch " << batch);
    tj::Graph g;
    tj::GraphScope use(g);
    const tj::Shape shape{kBatch, 3, 5, 4};
    const std::vector<Tensor> grads = conv_bn_relu_conv(shape, 2);
    const std::vector<Tensor> vars = tj::trainable_variables();
    tj::momentum(0.1, 0.9).apply(std::vector<Tensor>(grads.begin(), grads.end() - 1), vars);
    const tj::kir::Program step = tj::lower_graph(g, {grads.back().id()}, g.update_ops).program;
    INFO(tj::kir::to_string(step));
    CHECK(kernels_loading_both(step) == 0);
    tj::reference::Feeds feeds{{"x", small_integers(shape.bind(batch), seed += 2)},
                               {"w", random_array(tj::Shape{kBatch, 2, 5, 4}.bind(batch), seed + 1)}};
    tj::reference::Variables variables = tj::reference::initialize_variables(g, seed);
    require_close(run_both(g, {grads.back()}, feeds, variables, /*updates=*/true, &threads),
                  "a momentum step at batch " + std::to_string(batch));
  }
}
