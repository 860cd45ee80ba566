// The CUDA backend's tools around the emitter: the compile-failure message, the dump and its
// index, the cache, architecture selection, and the Philox text NVRTC compiles (compiled here
// by g++ and checked against dsl/philox.cpp).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cuda_test_util.h"
#include "dsl/philox.h"
#include "jit/cuda/cuda_dump.h"
#include "jit/cuda/device/philox.h"

namespace tj = towerjit;
using tj::kBatch;
using namespace tj::testing;

TEST_CASE("the CUDA Philox text equals the CPU Philox bit for bit", "[cuda]") {
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xDEADBEEFCAFEull, ~0ull})
    for (uint64_t step : {0ull, 3ull, 1ull << 40})
      for (uint64_t index : {0ull, 1ull, 2ull, 3ull, 4ull, 999ull, (1ull << 33) + 5}) {
        INFO("seed " << seed << " step " << step << " index " << index);
        REQUIRE(tj_philox_bits(seed, step, index) == tj::philox_bits(seed, step, index));
        REQUIRE(tj_philox_uniform(seed, step, index) == static_cast<float>(tj::philox_uniform(seed, step, index)));
      }
}

TEST_CASE("a CUDA compile failure names the kernel, the dumped source and the NVRTC log", "[cuda]") {
  TOWERJIT_REQUIRE_NVRTC();
  tj::test::TempDir dump;
  tj::test::ScopedEnv dump_env("TOWERJIT_DUMP", dump.path());
  tj::test::ScopedEnv no_cache("TOWERJIT_CACHE", "off");
  const std::string source =
      "extern \"C\" __global__ void fine_kernel(float* a) { a[0] = 1.0f; }\n"
      "extern \"C\" __global__ void broken_kernel(float* a) {\n"
      "  a[0] = undefined_name;\n"
      "}\n";
  try {
    tj::cuda::compile_cuda(source, "broken_module", "sm_90");
    FAIL("no error");
  } catch (const tj::Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("kernel broken_kernel") != std::string::npos);
    CHECK(msg.find(dump.path() + "/broken_module.cu") != std::string::npos);
    CHECK(msg.find("undefined_name") != std::string::npos);  // the log itself
    CHECK(msg.find("broken_module.cu(3): error") != std::string::npos);
    CHECK(std::filesystem::exists(dump.path() + "/broken_module.cu"));
  }
}

TEST_CASE("kernel_at_line finds the kernel around a line of generated CUDA", "[cuda]") {
  const std::string src =
      "struct A { int f() { return 1; } };\n"
      "extern \"C\" __global__ void __launch_bounds__(256) k0_add(\n"
      "    float* b0, long long batch) {\n"
      "  b0[0] = 1;\n"
      "}\n"
      "\n"
      "extern \"C\" __global__ void k1_mul(float* b0) {\n"
      "  b0[0] = 2;\n"
      "}\n";
  CHECK(tj::cuda::kernel_at_line(src, 1).empty());
  CHECK(tj::cuda::kernel_at_line(src, 3) == "k0_add");
  CHECK(tj::cuda::kernel_at_line(src, 4) == "k0_add");
  CHECK(tj::cuda::kernel_at_line(src, 6).empty());
  CHECK(tj::cuda::kernel_at_line(src, 8) == "k1_mul");
}

TEST_CASE("the CUDA architecture comes from the argument, then TOWERJIT_CUDA_ARCH, then sm_90", "[cuda]") {
  tj::test::ScopedEnv unset("TOWERJIT_CUDA_ARCH", std::nullopt);
  CHECK(tj::cuda::resolve_arch() == "sm_90");
  CHECK(tj::cuda::resolve_arch("", std::string("sm_80")) == "sm_80");
  CHECK(tj::cuda::resolve_arch("86") == "sm_86");
  CHECK(tj::cuda::resolve_arch("compute_90a") == "sm_90a");
  {
    tj::test::ScopedEnv set("TOWERJIT_CUDA_ARCH", "sm_75");
    CHECK(tj::cuda::resolve_arch() == "sm_75");
    CHECK(tj::cuda::resolve_arch("", std::string("sm_80")) == "sm_75");
    CHECK(tj::cuda::resolve_arch("sm_89") == "sm_89");
  }
  CHECK_THROWS_WITH(tj::cuda::resolve_arch("volta"), Catch::Contains("sm_NN"));
}

TEST_CASE("compiled CUDA is cached by source and architecture, and dumped with its PTX", "[cuda]") {
  TOWERJIT_REQUIRE_NVRTC();
  tj::test::CacheSandbox sandbox;
  tj::test::TempDir dump;
  const std::string src = "extern \"C\" __global__ void k(float* a) { a[threadIdx.x] *= 2.0f; }\n";
  auto first = tj::cuda::compile_cuda(src, "cached", "sm_80");
  auto again = tj::cuda::compile_cuda(src, "cached", "sm_80");
  auto other = tj::cuda::compile_cuda(src, "cached", "sm_90");
  CHECK_FALSE(first.cache_hit);
  CHECK(again.cache_hit);
  CHECK_FALSE(other.cache_hit);
  CHECK(again.cubin == first.cubin);
  CHECK(again.ptx == first.ptx);
  tj::test::ScopedEnv dump_env("TOWERJIT_DUMP", dump.path());
  tj::cuda::compile_cuda(src, "dumped", "sm_80");
  CHECK(std::filesystem::exists(dump.path() + "/dumped.cu"));
  CHECK(std::filesystem::file_size(dump.path() + "/dumped.ptx") > 0);
}

TEST_CASE("the CUDA dump index names every op of the training step with its launch shape", "[cuda]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 12});
  auto label = tj::input("label", {kBatch}, tj::DType::i32);
  auto logits = tj::dense(tj::relu(tj::dense(x, 8, "fc1")), 4, "fc2");
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, label));
  auto vars = tj::trainable_variables();
  auto grads = tj::grad(loss, vars);
  for (size_t i = 0; i < vars.size(); ++i) tj::assign(vars[i], vars[i] - 0.1 * grads[i]);
  tj::LoweredProgram lowered = tj::lower_graph(g, {loss.id()}, g.update_ops);
  auto m = tj::cuda::emit_cuda_module(lowered.graph, lowered.program, "step");
  auto index = nlohmann::json::parse(tj::cuda::cuda_index_json(lowered.graph, lowered.program, m, "step"));
  std::set<int> named;
  for (const auto& step : index["steps"]) {
    if (step["kind"] == "kernel") {
      CHECK(step["launch"]["block"] == 256);
      // A reduction also takes its partials' workspace, the points per split and the one-pass
      // ticket, and the index gives its split on the dump's device.
      const bool reduction = step["launch"].contains("split");
      CHECK(step["launch"]["params"].back() == (reduction ? "unsigned int* tj_ticket" : "const tj_u64* step_slot"));
      if (reduction) CHECK(step["launch"]["split"]["on"].contains("132 SMs"));
    }
    if (step.contains("ops"))
      for (const auto& op : step["ops"]) named.insert(op["node"].get<int>());
  }
  // Every computing node the step needs is named (leaves, views and folded transposes move no data).
  const tj::Graph& lg = lowered.graph;
  std::vector<bool> needed(lg.size(), false);
  std::vector<int> stack;  // from every node that has a buffer, and the update ops
  for (int u : lg.update_ops) stack.push_back(u);
  for (const auto& b : lowered.program.buffers)
    for (int n : b.nodes) stack.push_back(n);
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (n < 0 || needed[n]) continue;
    needed[n] = true;
    if (lg.node(n).op != tj::Op::Count)
      for (int in : lg.node(n).inputs) stack.push_back(in);
  }
  for (int n = 0; n < lg.size(); ++n) {
    const tj::Op op = lg.node(n).op;
    if (!needed[n] || op == tj::Op::Input || op == tj::Op::Variable || op == tj::Op::Assign ||
        op == tj::Op::Reshape || op == tj::Op::Transpose)
      continue;
    INFO("node " << lg.node_str(n));
    CHECK(named.count(n) == 1);
  }
  // The source heads each kernel with its ops and file:line.
  CHECK(m.source.find("test_cuda_tools.cpp:") != std::string::npos);
}
