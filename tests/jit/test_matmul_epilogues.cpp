// The matrix products' epilogues (jit/passes/epilogues.h): which kernels the pass takes
// into a product and which it leaves, on the kernel IR; and the CPU's results with them
// against the reference, at odd sizes and batched, the same bits every run.
#include <catch2/catch.hpp>

#include <cstring>

#include "epilogue_cases.h"
#include "jit/passes/pipeline.h"
#include "runtime/thread_pool.h"
#include "tests/jit/cpu_test_env.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using tj::kir::Epilogue;
using namespace tj::testing;

namespace {

// The epilogue of the program's only matrix product.
Epilogue epilogue_of(const tj::kir::Program& p) {
  REQUIRE(p.calls.size() == 1);
  return p.calls[0].epilogue;
}

}  // namespace

TEST_CASE("a dense layer's bias add and ReLU are its product's epilogue: one call and no kernel", "[jit][fusion]") {
  for (const EpilogueCase& c : epilogue_cases()) {
    INFO(c.str());
    tj::Graph g;
    tj::GraphScope use(g);
    tj::reference::Feeds feeds;
    const Tensor y = epilogue_graph(c, feeds, 1);
    const tj::kir::Program p = lower(g, {y});
    INFO(tj::kir::to_string(p));
    CHECK(kernel_steps(p) == 0);
    CHECK(epilogue_of(p) == (c.relu ? Epilogue::bias_relu : Epilogue::bias));
    CHECK(p.calls[0].inputs.size() == 3);
    CHECK(p.calls[0].output == p.fetches[0]);
  }
}

TEST_CASE("a product keeps its kernel when the kernel does more than bias and ReLU or others read the values between",
          "[jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 8}), w = tj::input("w", {8, 4}), b = tj::input("b", {4});
  const Tensor pre = tj::matmul(x, w) + b;
  SECTION("the pre-activation is fetched too: the kernel stores both") {
    const tj::kir::Program p = lower(g, {tj::relu(pre), pre});
    CHECK(kernel_steps(p) == 1);
    CHECK(epilogue_of(p) == Epilogue::none);
  }
  SECTION("GELU: cuBLASLt's is the tanh approximation, the DSL's the erf form") {
    const tj::kir::Program p = lower(g, {tj::gelu(pre)});
    CHECK(kernel_steps(p) == 1);
    CHECK(epilogue_of(p) == Epilogue::none);
  }
  SECTION("the product itself is fetched") {
    const Tensor product = tj::matmul(x, w);
    const tj::kir::Program p = lower(g, {tj::relu(product + b), product});
    CHECK(epilogue_of(p) == Epilogue::none);
  }
  SECTION("a bias that is not one value per column") {
    const Tensor rows = tj::input("rows", {kBatch, 4});
    const tj::kir::Program p = lower(g, {tj::relu(tj::matmul(x, w) + rows)});
    CHECK(kernel_steps(p) == 1);
    CHECK(epilogue_of(p) == Epilogue::none);
  }
  SECTION("more work in the kernel than the bias") {
    const tj::kir::Program p = lower(g, {tj::relu(pre * 2.0)});
    CHECK(kernel_steps(p) == 1);
    CHECK(epilogue_of(p) == Epilogue::none);
  }
  SECTION("TOWERJIT_MATMUL_EPILOGUES=off") {
    tj::test::ScopedEnv off("TOWERJIT_MATMUL_EPILOGUES", "off");
    const tj::kir::Program p = lower(g, {tj::relu(pre)});
    CHECK(kernel_steps(p) == 1);
    CHECK(epilogue_of(p) == Epilogue::none);
  }
}

TEST_CASE("the kernel IR's text names a product's epilogue", "[jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 8}), w = tj::input("w", {8, 4}), b = tj::input("b", {4});
  CHECK(tj::kir::to_string(lower(g, {tj::relu(tj::matmul(x, w) + b)})) == R"(b0 = input "x" f32[B,8]
b1 = input "w" f32[8,4]
b2 = input "b" f32[4]
b3 = temp "t3" f32[B,4]
b4 = temp "t4" f32[B,4]
call matmul b0, b1, b2 -> b4 (epilogue bias+relu)
fetch b4
)");
}

TEST_CASE("products with bias and ReLU epilogues match the reference on the CPU and give the same bits every run",
          "[cpu][jit]") {
  tj::ThreadPool threads(2);
  uint32_t seed = 100;
  for (const EpilogueCase& c : epilogue_cases()) {
    tj::Graph g;
    tj::GraphScope use(g);
    tj::reference::Feeds feeds;
    const Tensor y = epilogue_graph(c, feeds, seed += 3);
    tj::reference::Variables vars;
    const JitRun serial = run_both(g, {y}, feeds, vars);
    require_close(serial, c.str() + " on one thread");
    const JitRun pooled = run_both(g, {y}, feeds, vars, false, &threads);
    require_close(pooled, c.str() + " over the pool");
    // Run to run: the same program again gives the same bits.
    tj::HostFeeds hf;
    for (const auto& [name, a] : feeds) hf[name] = to_host(a);
    tj::HostVariables hv;
    const tj::HostTensor again = pooled.program->run(hf, hv).at(0);
    const tj::HostTensor once_more = pooled.program->run(hf, hv).at(0);
    CHECK(std::memcmp(again.f32.data(), once_more.f32.data(), again.f32.size() * 4) == 0);
  }
}

TEST_CASE("products of bf16 and f16 operands take the epilogue too and match the reference on the CPU",
          "[cpu][jit]") {
  for (tj::DType t : {tj::DType::bf16, tj::DType::f16}) {
    tj::Graph g;
    tj::GraphScope use(g);
    tj::reference::Feeds feeds;
    const Tensor y = half_epilogue_graph(t, feeds, 31);
    const tj::kir::Program p = lower(g, {y});
    INFO(tj::kir::to_string(p));
    CHECK(std::count_if(p.calls.begin(), p.calls.end(), [](const tj::kir::LibraryCall& c) {
            return c.epilogue == Epilogue::bias_relu;
          }) == 1);
    tj::reference::Variables vars;
    require_close(run_both(g, {y}, feeds, vars), std::string(tj::dtype_name(t)) + " operands");
  }
}

TEST_CASE("a dense+ReLU training step with the epilogue matches the reference", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 127});
  const Tensor h = tj::relu(tj::dense(x, 7, "fc1"));
  const Tensor y = tj::dense(h, 5, "fc2");
  auto grads = tj::grad(tj::sum(y * y), tj::trainable_variables());
  std::vector<Tensor> fetches{y};
  fetches.insert(fetches.end(), grads.begin(), grads.end());
  const tj::kir::Program p = lower(g, fetches);
  INFO(tj::kir::to_string(p));
  CHECK(std::count_if(p.calls.begin(), p.calls.end(),
                      [](const tj::kir::LibraryCall& c) { return c.epilogue == Epilogue::bias_relu; }) == 1);
  tj::reference::Feeds feeds{{"x", random_array({9, 127}, 7)}};
  tj::reference::Variables vars = tj::reference::initialize_variables(g, 1);
  require_close(run_both(g, fetches, feeds, vars), "dense+relu, dense: forward and gradients");
}
