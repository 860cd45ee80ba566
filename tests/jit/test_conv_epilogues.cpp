// The convolutions' epilogues (jit/passes/epilogues.h): which bias and ReLU kernels the pass
// takes into a Conv2D and which it leaves, on the kernel IR; and the CPU's results with them
// (runtime/cpu/conv_epilogue.h) against the reference on every forward path, the same bits as
// the loop kernel they replace, on one thread and on the pool.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "epilogue_cases.h"
#include "jit/cuda/cuda_dump.h"
#include "jit/passes/half_matmuls.h"
#include "jit/passes/pipeline.h"
#include "runtime/thread_pool.h"
#include "tests/jit/cpu_test_env.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using tj::kir::Epilogue;
using namespace tj::testing;

namespace {

// The epilogues of the program's forward convolutions, in order.
std::vector<Epilogue> conv_epilogues(const tj::kir::Program& p) {
  std::vector<Epilogue> e;
  for (const tj::kir::LibraryCall& c : p.calls)
    if (c.op == tj::Op::Conv2D) e.push_back(c.epilogue);
  return e;
}

// The fetch of `fetches`' first, as bytes, from a CPU program over `feeds`.
std::vector<float> run_cpu(const tj::Graph& g, const Tensor& y, const tj::reference::Feeds& feeds,
                           tj::ThreadPool* pool = nullptr) {
  tj::CpuProgram program(g, {y}, false, pool);
  tj::HostFeeds hf;
  for (const auto& [name, a] : feeds) hf[name] = to_host(a);
  tj::HostVariables hv;
  return program.run(hf, hv).at(0).f32;
}

}  // namespace

TEST_CASE("a convolution's bias add and ReLU are its epilogue: one call and no kernel", "[jit][fusion]") {
  for (const ConvEpilogueCase& c : conv_epilogue_cases()) {
    INFO(c.str());
    tj::Graph g;
    tj::GraphScope use(g);
    tj::reference::Feeds feeds;
    const Tensor y = conv_epilogue_graph(c, feeds, 1);
    const tj::kir::Program p = lower(g, {y});
    INFO(tj::kir::to_string(p));
    CHECK(kernel_steps(p) == 0);
    REQUIRE(p.calls.size() == 1);
    CHECK(p.calls[0].epilogue == (c.relu ? Epilogue::bias_relu : Epilogue::bias));
    CHECK(p.calls[0].inputs.size() == 3);
    CHECK(p.calls[0].output == p.fetches[0]);
    CHECK(tj::kir::to_string(p).find(c.relu ? "(epilogue bias+relu)" : "(epilogue bias)") != std::string::npos);
    // The CUDA dump's name for the call: cuDNN and a kernel after it, or the implicit GEMM's own.
    CHECK_THAT(tj::cuda::library_routine(p.calls[0]), Catch::Contains("cudnnConvolutionForward + tj_conv_epilogue"));
    CHECK(tj::cuda::library_routine(p.calls[0], false) ==
          std::string("tj_conv2d_implicit (epilogue ") + (c.relu ? "bias+relu" : "bias") + ")");
  }
}

TEST_CASE("a convolution keeps its kernel when the kernel does more than bias and ReLU or others read the values",
          "[jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 3, 8, 8}), w = tj::input("w", {4, 3, 3, 3}), b = tj::input("b", {4});
  const Tensor conv = tj::conv2d(x, w, {.pad = 1});
  const Tensor pre = conv + tj::reshape(b, {1, 4, 1, 1});
  SECTION("the pre-activation is fetched too: the kernel stores both") {
    const tj::kir::Program p = lower(g, {tj::relu(pre), pre});
    CHECK(kernel_steps(p) == 1);
    CHECK(conv_epilogues(p) == std::vector<Epilogue>{Epilogue::none});
  }
  SECTION("the convolution itself is fetched") {
    const tj::kir::Program p = lower(g, {tj::relu(pre), conv});
    CHECK(conv_epilogues(p) == std::vector<Epilogue>{Epilogue::none});
  }
  SECTION("a bias that is one value per pixel, not per channel") {
    const Tensor per_pixel = tj::input("p", {1, 1, 8, 8});
    const tj::kir::Program p = lower(g, {tj::relu(conv + per_pixel)});
    CHECK(kernel_steps(p) == 1);
    CHECK(conv_epilogues(p) == std::vector<Epilogue>{Epilogue::none});
  }
  SECTION("a bias that is one value per image") {
    const Tensor per_image = tj::input("q", {kBatch, 1, 1, 1});
    const tj::kir::Program p = lower(g, {tj::relu(conv + per_image)});
    CHECK(kernel_steps(p) == 1);
    CHECK(conv_epilogues(p) == std::vector<Epilogue>{Epilogue::none});
  }
  SECTION("more work in the kernel than the bias") {
    const tj::kir::Program p = lower(g, {tj::relu(pre * 2.0)});
    CHECK(kernel_steps(p) == 1);
    CHECK(conv_epilogues(p) == std::vector<Epilogue>{Epilogue::none});
  }
  SECTION("a 16-bit convolution (the conv precision policy): its result is not f32") {
    tj::set_precision_policy({.conv_operands = tj::DType::bf16});
    const tj::kir::Program p = lower(g, {tj::relu(pre)});
    tj::set_precision_policy({});
    INFO(tj::kir::to_string(p));
    CHECK(conv_epilogues(p) == std::vector<Epilogue>{Epilogue::none});
  }
  SECTION("TOWERJIT_CONV_EPILOGUES=off, and products keep theirs") {
    tj::test::ScopedEnv off("TOWERJIT_CONV_EPILOGUES", "off");
    const tj::kir::Program p = lower(g, {tj::relu(pre)});
    CHECK(kernel_steps(p) == 1);
    CHECK(conv_epilogues(p) == std::vector<Epilogue>{Epilogue::none});
    const Tensor v = tj::input("v", {kBatch, 8}), m = tj::input("m", {8, 4});
    CHECK(lower(g, {tj::relu(tj::matmul(v, m) + b)}).calls[0].epilogue == Epilogue::bias_relu);
  }
  SECTION("TOWERJIT_MATMUL_EPILOGUES=off leaves the convolutions' on") {
    tj::test::ScopedEnv off("TOWERJIT_MATMUL_EPILOGUES", "off");
    CHECK(conv_epilogues(lower(g, {tj::relu(pre)})) == std::vector<Epilogue>{Epilogue::bias_relu});
  }
}

TEST_CASE("convolutions with bias and ReLU epilogues match the reference on the CPU and keep the loop kernel's bits",
          "[cpu][jit]") {
  tj::ThreadPool threads(2);
  uint32_t seed = 300;
  for (const ConvEpilogueCase& c : conv_epilogue_cases())
    for (const char* direct : {"on", "off"}) {  // the direct and narrow kernels, then im2col + sgemm
      tj::test::ScopedEnv path("TOWERJIT_DIRECT_CONV", direct);
      const std::string what = c.str() + ", TOWERJIT_DIRECT_CONV=" + direct;
      INFO(what);
      tj::Graph g;
      tj::GraphScope use(g);
      tj::reference::Feeds feeds;
      const Tensor y = conv_epilogue_graph(c, feeds, seed += 3);
      tj::reference::Variables vars;
      require_close(run_both(g, {y}, feeds, vars), what + " on one thread");
      const JitRun pooled = run_both(g, {y}, feeds, vars, false, &threads);
      require_close(pooled, what + " over the pool");
      // The epilogue computes the loop kernel's float operations: the same bits as without it,
      // on one thread or two, every run.
      const std::vector<float> fused = run_cpu(g, y, feeds, &threads);
      CHECK(same_bits(fused, to_host(pooled.jit[0]).f32));
      CHECK(same_bits(fused, run_cpu(g, y, feeds)));
      tj::test::ScopedEnv off("TOWERJIT_CONV_EPILOGUES", "off");
      CHECK(same_bits(fused, run_cpu(g, y, feeds, &threads)));
    }
}

TEST_CASE("the DSL's ReLU in a convolution's epilogue: zeros give +0 and NaN stays NaN", "[cpu][jit]") {
  // One 1x1 filter of weight 1 and a bias of -0.0: the pre-activations are x's values.
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {1, 1, 1, 8}), w = tj::input("w", {1, 1, 1, 1}), b = tj::input("b", {1});
  const Tensor y = tj::relu(tj::conv2d(x, w) + tj::reshape(b, {1, 1, 1, 1}));
  REQUIRE(conv_epilogues(lower(g, {y})) == std::vector<Epilogue>{Epilogue::bias_relu});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  tj::reference::Feeds feeds{{"x", random_array({1, 1, 1, 8}, 1)}, {"w", random_array({1, 1, 1, 1}, 2)},
                             {"b", random_array({1}, 3)}};
  tj::HostFeeds hf;
  for (const auto& [name, a] : feeds) hf[name] = to_host(a);
  hf["x"].f32 = {-0.0f, 0.0f, -1.5f, 2.5f, nan, -nan, 1e-30f, -1e-30f};
  hf["w"].f32 = {1.0f};
  hf["b"].f32 = {-0.0f};
  tj::HostVariables hv;
  tj::CpuProgram program(g, {y});
  const std::vector<float> out = program.run(hf, hv).at(0).f32;
  const std::vector<float> zero{0.0f};
  CHECK(std::memcmp(&out[0], zero.data(), 4) == 0);  // relu of a zero of either sign is +0
  CHECK(std::memcmp(&out[1], zero.data(), 4) == 0);
  CHECK(out[2] == 0.0f);
  CHECK(out[3] == 2.5f);
  CHECK(std::isnan(out[4]));
  CHECK(std::isnan(out[5]));
  CHECK(out[6] == 1e-30f);
  CHECK(out[7] == 0.0f);
}

TEST_CASE("a conv+ReLU+pool training step with the epilogues matches the reference", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 1, 14, 14});
  Tensor h = tj::relu(tj::conv2d(x, 7, 3, "conv1", {.pad = 1}));
  h = tj::max_pool2d(h);
  h = tj::relu(tj::conv2d(h, 5, 3, "conv2", {.pad = 1}));
  const Tensor y = tj::dense(tj::reshape(h, {kBatch, 5 * 7 * 7}), 3, "fc");
  auto grads = tj::grad(tj::sum(y * y), tj::trainable_variables());
  std::vector<Tensor> fetches{y};
  fetches.insert(fetches.end(), grads.begin(), grads.end());
  const tj::kir::Program p = lower(g, fetches);
  INFO(tj::kir::to_string(p));
  CHECK(conv_epilogues(p) == std::vector<Epilogue>{Epilogue::bias_relu, Epilogue::bias_relu});
  tj::reference::Feeds feeds{{"x", random_array({7, 1, 14, 14}, 11)}};
  tj::reference::Variables vars = tj::reference::initialize_variables(g, 1);
  require_close(run_both(g, fetches, feeds, vars), "conv+relu, pool, conv+relu, dense: forward and gradients");
}
