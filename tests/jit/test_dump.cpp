// TOWERJIT_DUMP: the index names every computing op of the graph with the user's file:line.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "jit/dump.h"
#include "jit/passes/pipeline.h"
#include "runtime/cpu/cpu_program.h"
#include "towerjit.h"

namespace tj = towerjit;

TEST_CASE("the dump index names every op of a training step with its file:line", "[jit][dump]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {tj::kBatch, 12});
  auto labels = tj::input("labels", {tj::kBatch}, tj::DType::i32);
  auto logits = tj::dense(tj::relu(tj::dense(x, 8, "fc1")), 3, "fc2");
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
  auto grads = tj::grad(loss, tj::trainable_variables());
  std::vector<tj::Tensor> fetches = {loss};
  fetches.insert(fetches.end(), grads.begin(), grads.end());

  const auto dir = std::filesystem::temp_directory_path() / ("towerjit-dump-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ::setenv("TOWERJIT_DUMP", dir.c_str(), 1);
  tj::CpuProgram program(g, fetches);
  ::unsetenv("TOWERJIT_DUMP");

  std::vector<std::filesystem::path> index_files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().string().ends_with(".index.json")) index_files.push_back(e.path());
  REQUIRE(index_files.size() == 1);
  const std::string stem = index_files[0].string().substr(0, index_files[0].string().size() - 11);
  CHECK(std::filesystem::exists(stem + ".ll"));
  CHECK(std::filesystem::exists(stem + ".kir"));

  std::filesystem::remove_all(dir);

  // The index speaks of the optimised graph the program was lowered from.
  std::vector<int> ids;
  for (const auto& f : fetches) ids.push_back(f.id());
  const tj::LoweredProgram lowered = tj::lower_graph(g, ids, {});
  auto index = nlohmann::json::parse(tj::dump_index_json(lowered.graph, lowered.program, "step"));
  // The cross-entropy's forward kernel holds two sibling reductions; the index names both.
  bool siblings = false;
  for (const auto& step : index["steps"])
    if (step.contains("reductions") && step["reductions"].size() == 2) {
      siblings = true;
      CHECK(step["reductions"][0] == "reduce_logsumexp");
      CHECK(step["reductions"][1] == "sum");
      CHECK(step["reduce"] == "reduce_logsumexp");
    }
  CHECK(siblings);
  std::set<int> named;
  for (const auto& step : index["steps"])
    for (const auto& op : step["ops"]) {
      named.insert(op["node"].get<int>());
      // Every op points at the user's line: this file builds the whole model.
      CHECK(op["at"].get<std::string>().starts_with("tests/jit/test_dump.cpp:"));
    }
  // Every node the fetches need, except bookkeeping that computes nothing, is in some step.
  const tj::Graph& opt = lowered.graph;
  std::vector<int> stack;
  for (int b : lowered.program.fetches) stack.push_back(lowered.program.buffers[b].nodes[0]);
  std::set<int> needed;
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (!needed.insert(n).second || opt.node(n).op == tj::Op::Count) continue;
    for (int in : opt.node(n).inputs) stack.push_back(in);
  }
  for (int n : needed) {
    const tj::Op op = opt.node(n).op;
    if (op == tj::Op::Input || op == tj::Op::Variable || op == tj::Op::Reshape ||
        op == tj::Op::Transpose)  // leaves, views, and transposes folded into a GEMM
      continue;
    INFO("node " << opt.node_str(n));
    CHECK(named.count(n) == 1);
  }
}
