// Every kernel of every test graph compiles through NVRTC for sm_80 and sm_90, on any machine
// (no GPU needed): the op set, random fused graphs, the MLP and CNN training steps, and the
// library kernels. Where NVRTC is missing the tests say so and pass.
#include <optional>
#include <random>

#include "cuda_test_util.h"
#include "op_cases.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

// Momentum SGD as update ops, as examples/dump_cuda.cpp.
void momentum_updates(Tensor loss) {
  auto vars = tj::trainable_variables();
  auto grads = tj::grad(loss, vars);
  for (size_t i = 0; i < vars.size(); ++i) {
    auto m = tj::variable(vars[i].node().attrs.name + "/momentum", vars[i].shape(),
                          {.init = tj::init::zeros(), .trainable = false});
    auto next = 0.9 * m + grads[i];
    tj::assign(m, next);
    tj::assign(vars[i], vars[i] - 0.05 * next);
  }
}

// A random fused graph over x [B,8,12] (or [3,B,8]): elementwise chains with broadcasts,
// reductions over random axes (trailing and not), transposes, slices, randoms and casts.
Tensor random_fused(std::mt19937& rng, const std::string& prefix) {
  const bool batch_first = rng() % 3 != 0;
  auto x = tj::input(prefix + "x", batch_first ? tj::Shape{kBatch, 8, 12} : tj::Shape{3, kBatch, 8});
  auto row = tj::input(prefix + "row", {x.shape()[2]});
  Tensor t = x;
  const int ops = 3 + rng() % 8;
  for (int i = 0; i < ops; ++i) {
    switch (rng() % 10) {
      case 0: t = tj::exp(tj::tanh(t)); break;
      case 1: t = tj::gelu(t) + row; break;
      case 2: t = tj::where(t > row, t * 2.5, tj::softplus(t)); break;
      case 3: t = t + tj::random_uniform_like(t, rng()); break;
      case 4: t = tj::cast(tj::cast(t * 4, tj::DType::i32), tj::DType::f32) / 3; break;
      case 5: t = tj::sigmoid(t) * tj::max(t, {2}, true); break;          // trailing
      case 6: t = t - tj::mean(t, {0}, true); break;                      // leading
      case 7: t = t * tj::sum(t, {1}, true); break;                       // middle
      case 8: t = tj::transpose(tj::transpose(t, {0, 2, 1}) * 2, {0, 2, 1}); break;
      default: t = tj::abs(t) + tj::sqrt(tj::abs(t) + 1); break;
    }
  }
  if (rng() % 2) return tj::sum(tj::slice(t, {0, 0, 1}, {t.shape()[0], t.shape()[1], 5}), {0, 2});
  return t;
}

}  // namespace

TEST_CASE("every op of the op set compiles to CUDA for sm_80 and sm_90", "[cuda]") {
  TOWERJIT_REQUIRE_NVRTC();
  tj::Graph g;
  tj::GraphScope use(g);
  std::vector<Tensor> outs;
  int i = 0;
  for (const Case& c : op_cases()) {
    const std::string n = std::to_string(i++);
    auto x = tj::input("x" + n, {kBatch, 7});
    auto y = c.y_batched ? tj::input("y" + n, {kBatch, 7}) : tj::input("y" + n, {7});
    outs.push_back(c.build(x, y));
  }
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  auto logits = tj::input("logits", {kBatch, 10});
  outs.push_back(tj::mean(tj::softmax_cross_entropy(logits, labels)));
  outs.push_back(tj::one_hot(labels, 10));
  auto img = tj::input("img", {kBatch, 3, 7, 9});
  auto w = tj::input("w", {5, 3, 3, 3});
  auto conv = tj::conv2d(img, w, {.stride = 2, .pad = 1});
  auto maxp = tj::max_pool2d(img, {.kernel = 3, .stride = 2, .pad = 1});
  auto avgp = tj::avg_pool2d(img, {.kernel = 2});
  auto grads = tj::grad(tj::sum(conv * conv) + tj::sum(maxp * maxp) + tj::sum(avgp * avgp), {img, w});
  outs.insert(outs.end(), {conv, maxp, avgp, grads[0], grads[1]});
  outs.push_back(tj::random_uniform_like(logits, 42));
  auto bn = tj::batch_norm(tj::input("bn_x", {kBatch, 4}), true, "bn", {.axis = 1});
  outs.push_back(bn);
  require_compiles(g, ids(outs), g.update_ops, "op_set");
}

TEST_CASE("random fused graphs compile to CUDA for sm_80 and sm_90", "[cuda]") {
  TOWERJIT_REQUIRE_NVRTC();
  // One module of 12 graphs (about 60 kernels): NVRTC takes ~70 ms a kernel, so more graphs
  // cost seconds each and these shapes already reach every scheme.
  tj::Graph g;
  tj::GraphScope use(g);
  std::vector<Tensor> outs;
  for (uint32_t k = 0; k < 12; ++k) {
    std::mt19937 rng(k);
    outs.push_back(random_fused(rng, "g" + std::to_string(k) + "_"));
  }
  require_compiles(g, ids(outs), {}, "random_fused");
}

TEST_CASE("the MLP and CNN training steps compile to CUDA for sm_80 and sm_90", "[cuda]") {
  TOWERJIT_REQUIRE_NVRTC();
  for (const bool conv : {false, true}) {
    // The MLP with its bias+ReLU kernels (TOWERJIT_MATMUL_EPILOGUES=off), the float4
    // elementwise scheme's case below; with the epilogues on, the products take them.
    std::optional<tj::test::ScopedEnv> no_epilogues;
    if (!conv) no_epilogues.emplace("TOWERJIT_MATMUL_EPILOGUES", "off");
    tj::Graph g;
    tj::GraphScope use(g);
    auto image = tj::input("image", {kBatch, 784});
    auto label = tj::input("label", {kBatch}, tj::DType::i32);
    Tensor logits;
    if (conv) {
      auto x = tj::reshape(image, {kBatch, 1, 28, 28});
      x = tj::max_pool2d(tj::relu(tj::conv2d(x, 16, 3, "conv1", {.pad = 1})));
      x = tj::max_pool2d(tj::relu(tj::conv2d(x, 32, 3, "conv2", {.pad = 1})));
      logits = tj::dense(tj::reshape(x, {kBatch, 1568}), 10, "logits");
    } else {
      logits = tj::dense(tj::relu(tj::dense(tj::relu(tj::dense(image, 512, "fc1")), 512, "fc2")), 10, "logits");
    }
    auto loss = tj::mean(tj::softmax_cross_entropy(logits, label));
    momentum_updates(loss);
    auto m = require_compiles(g, {loss.id()}, g.update_ops, conv ? "cnn_step" : "mlp_step");
    if (!conv) {  // the schemes the MLP step needs are all there
      using S = tj::cuda::EmittedKernel::Scheme;
      auto has = [&](S s, int width) {
        for (const auto& k : m.kernels)
          if (k.scheme == s && k.vector_width >= width) return true;
        return false;
      };
      CHECK(has(S::elementwise, 4));   // bias + relu (the apply is a group kernel: width 1)
      CHECK(has(S::row_per_warp, 1));  // softmax rows
      CHECK(has(S::row_per_block, 1)); // the mean over the batch
      CHECK(has(S::column, 1));        // bias gradients
    }
  }
}

TEST_CASE("the library kernels compile for sm_80 and sm_90 and define every entry", "[cuda]") {
  TOWERJIT_REQUIRE_NVRTC();
  tj::test::ScopedEnv no_cache("TOWERJIT_CACHE", "off");
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto bin = tj::cuda::compile_cuda(tj::cuda::library_module_source(), "towerjit_library", arch);
    CHECK(!bin.cubin.empty());
    for (const auto& name : tj::cuda::library_kernel_names()) {
      INFO(name << " for " << arch);
      CHECK(bin.ptx.find(".entry " + name + "(") != std::string::npos);
    }
  }
}
