// The CPU JIT's property test on the GPU: the same 300 random DAGs of elementwise ops,
// broadcasts, reductions and layout ops (tests/jit/test_random_graphs.cpp, drawn from the same
// seeds), run through CudaProgram and the reference interpreter; relative error <= 1e-5 of
// max(1, |reference|), in f32. Ten cases share one graph and one program.
#include <catch2/catch.hpp>

#include "tests/jit/random_dags.h"
#include "gpu_check.h"

namespace {

Outcome run_on_gpu(const std::vector<Dag>& dags) {
  return run_dags(dags, [](auto&&... a) { return run_gpu_and_reference(a...); }, "gpu");
}

}  // namespace

TEST_CASE("GPU: random elementwise, broadcast, reduction and layout DAGs match the reference", "[gpu]") {
  tj::test::ScopedEnv no_cache("TOWERJIT_CACHE", "off");  // random kernels: don't fill the cache
  std::vector<int> failing;
  for (int first = 0; first < kCases; first += kCasesPerProgram) {
    const int64_t batch = kBatches[(first / kCasesPerProgram) % 3];
    std::vector<Dag> dags;
    for (int k = first; k < first + kCasesPerProgram; ++k) dags.push_back(random_dag(static_cast<uint32_t>(k), batch));
    const Outcome together = run_on_gpu(dags);
    if (!together.failed) continue;
    bool alone_fails = false;
    for (const Dag& d : dags) {  // which cases fail on their own, each printed with its graph
      const Outcome alone = run_on_gpu({d});
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
