// The CPU JIT's property test on the GPU: the same 300 random DAGs of elementwise ops,
// broadcasts, reductions and layout ops (tests/jit/test_random_graphs.cpp, drawn from the same
// seeds), run through CudaProgram and the reference interpreter; relative error <= 1e-5 of
// max(1, |reference|), in f32. Ten cases share one graph and one program.
#include <catch2/catch.hpp>

// The generator (random_dag, Builder, describe) is used as it is, from the CPU test's file;
// that file's own test cases are compiled here as plain functions, not registered: they
// belong to the main suite.
#pragma push_macro("TEST_CASE")
#undef TEST_CASE
#define TEST_CASE(...) [[maybe_unused]] static void INTERNAL_CATCH_UNIQUE_NAME(cpu_property_case_)()
#include "tests/jit/test_random_graphs.cpp"
#undef TEST_CASE
#pragma pop_macro("TEST_CASE")

#include "gpu_check.h"

namespace {

struct GpuOutcome {
  bool failed = false;
  std::string detail;
};

// Builds `dags` into one graph, runs it on the GPU and through the reference, compares.
GpuOutcome run_dags_on_gpu(const std::vector<Dag>& dags) {
  GpuOutcome o;
  tj::Graph g;
  tj::GraphScope use(g);
  std::vector<Tensor> fetches;
  tj::reference::Feeds feeds;
  std::vector<std::string> owner;
  for (size_t k = 0; k < dags.size(); ++k) {
    Builder b("d" + std::to_string(k) + "_");
    for (size_t i = 0; i < dags[k].nodes.size(); ++i) {
      b.add(dags[k].nodes[i]);
      if (dags[k].nodes[i].op == "input")
        feeds[b.input_name(static_cast<int>(i))] =
            random_array(b[i].shape().bind(dags[k].batch), dags[k].seed * 1000 + i);
    }
    for (int f : dags[k].fetches)
      fetches.push_back(b[f]), owner.push_back("seed " + std::to_string(dags[k].seed) + " n" + std::to_string(f));
  }
  try {
    tj::reference::Variables vars;
    JitRun r = run_gpu_and_reference(g, fetches, feeds, vars);
    for (size_t i = 0; i < r.ref.size(); ++i) {
      double worst = 0;
      int64_t at = -1;
      if (r.jit[i].shape == r.ref[i].shape)
        for (int64_t j = 0; j < r.ref[i].size(); ++j) {
          const double err = std::abs(r.jit[i][j] - r.ref[i][j]) / std::max(1.0, std::abs(r.ref[i][j]));
          if (!(err <= worst)) worst = err, at = j;
        }
      else
        worst = 1e9;
      if (worst > kRtol) {
        std::ostringstream m;
        m << owner[i] << ": shape " << r.ref[i].shape.str() << ", relative error " << worst << " at " << at;
        if (at >= 0) m << " (gpu " << r.jit[i][at] << ", reference " << r.ref[i][at] << ")";
        m << ", tolerance " << kRtol << "\n";
        o.failed = true;
        o.detail += m.str();
      }
    }
  } catch (const std::exception& e) {
    o.failed = true;
    o.detail = std::string("exception: ") + e.what();
  }
  return o;
}

}  // namespace

TEST_CASE("GPU: random elementwise, broadcast, reduction and layout DAGs match the reference", "[gpu]") {
  tj::test::ScopedEnv no_cache("TOWERJIT_CACHE", "off");  // random kernels: don't fill the cache
  std::vector<int> failing;
  for (int first = 0; first < kCases; first += kCasesPerProgram) {
    const int64_t batch = kBatches[(first / kCasesPerProgram) % 3];
    std::vector<Dag> dags;
    for (int k = first; k < first + kCasesPerProgram; ++k) dags.push_back(random_dag(static_cast<uint32_t>(k), batch));
    const GpuOutcome together = run_dags_on_gpu(dags);
    if (!together.failed) continue;
    bool alone_fails = false;
    for (const Dag& d : dags) {  // which cases fail on their own, each printed with its graph
      const GpuOutcome alone = run_dags_on_gpu({d});
      if (!alone.failed) continue;
      alone_fails = true;
      failing.push_back(static_cast<int>(d.seed));
      if (failing.size() <= 3) {
        tj::Graph scratch;
        tj::GraphScope use(scratch);
        Builder b("");
        for (const auto& n : d.nodes) b.add(n);
        FAIL_CHECK("random DAG differs on the GPU\n" << describe(d, &b) << alone.detail);
      }
    }
    if (!alone_fails)
      FAIL_CHECK("cases " << first << ".." << first + kCasesPerProgram - 1 << " fail together on the GPU but not alone:\n"
                          << together.detail);
  }
  std::ostringstream seeds;
  for (int s : failing) seeds << " " << s;
  INFO(kCases << " random DAGs on the GPU, failing seeds:" << seeds.str());
  CHECK(failing.empty());
}
