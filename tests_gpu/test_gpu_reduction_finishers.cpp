// Reduction finishers on the GPU (jit/passes/reduction_finishers.h): batch norm's per-channel
// kernels run by the thread that stores each channel's sums, where one block stores them (no
// split), in the combine kernel (two passes) and in the last block of a one-pass reduction.
// Against the reference, moving statistics included, at odd sizes; and the same bits as with
// TOWERJIT_REDUCTION_FINISHERS=off, where they are launches of their own, in any block order.
#include <cstring>

#include "gpu_check.h"
#include "jit/reference/interpreter.h"
#include "tests/jit/graph_cases.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

// Batch norm in training over [B, 3, 7, 9] (63 points a channel an image), its ReLU weighed into
// a loss: the gradients of gamma, beta and x; the moving statistics are the update ops.
std::vector<Tensor> batch_norm_step() {
  const Tensor x = tj::input("x", {kBatch, 3, 7, 9});
  const Tensor y = tj::relu(tj::batch_norm(x, /*training=*/true, "bn"));
  const Tensor w = tj::input("w", y.shape());
  std::vector<Tensor> wrt = tj::trainable_variables();
  wrt.push_back(x);
  return tj::grad(tj::sum(y * w), wrt);
}

tj::reference::Feeds feeds_at(int64_t batch, uint32_t seed) {
  return {{"x", random_array({batch, 3, 7, 9}, seed, -2, 2)}, {"w", random_array({batch, 3, 7, 9}, seed + 1)}};
}

// How the reductions that carry finishers launch at `batch`.
struct Paths {
  int finishing = 0, single = 0, combine = 0, one_pass = 0;
};
Paths paths_of(const tj::CudaProgram& p, int64_t batch) {
  Paths r;
  for (size_t i = 0; i < p.program().kernels.size(); ++i) {
    if (p.program().kernels[i].finishers.empty()) continue;
    const tj::cuda::Launch l = p.module().kernels[i].launch(batch, p.device().sm_count());
    ++r.finishing;
    r.single += l.splits == 1;
    r.combine += l.splits > 1 && l.combine_grid > 0;
    r.one_pass += l.splits > 1 && l.one_pass;
  }
  return r;
}

std::vector<tj::HostTensor> run(const tj::Graph& g, const std::vector<Tensor>& fetches, const tj::HostFeeds& feeds,
                                tj::HostVariables& vars) {
  tj::CudaProgram p(g, fetches, /*run_update_ops=*/true);
  return p.run(feeds, vars);
}

}  // namespace

TEST_CASE("GPU: batch norm's per-channel kernels finish its reductions, as the reference and unfused", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const std::vector<Tensor> fetches = batch_norm_step();
  Paths seen;
  // 1 and 7 images: one block a channel stores its sums. 261: 16443 points a channel, split.
  for (const int64_t batch : {int64_t{1}, int64_t{7}, int64_t{261}})
    for (const char* one_pass : {"on", "off"}) {
      const std::string what = "batch " + std::to_string(batch) + ", TOWERJIT_ONE_PASS_REDUCTIONS=" + one_pass;
      INFO(what);
      ScopedEnv passes("TOWERJIT_ONE_PASS_REDUCTIONS", one_pass);
      const tj::CudaProgram probe(g, fetches, true);
      const Paths paths = paths_of(probe, batch);
      CHECK(paths.finishing >= 2);  // the forward's statistics and the backward's sums
      seen.single += paths.single, seen.combine += paths.combine, seen.one_pass += paths.one_pass;

      tj::reference::Variables vars = tj::reference::initialize_variables(g, 5);
      vars["bn/gamma"] = random_array({3}, 6, -2, 2);
      vars["bn/beta"] = random_array({3}, 7);
      const tj::reference::Feeds feeds = feeds_at(batch, 8);
      tj::reference::Variables ref_vars = vars;
      require_close(run_gpu_and_reference(g, fetches, feeds, ref_vars, /*updates=*/true), what);

      tj::HostFeeds hf;
      for (const auto& [name, a] : feeds) hf[name] = to_host(a);
      tj::HostVariables on_vars, off_vars;
      for (const auto& [name, a] : vars) on_vars[name] = off_vars[name] = to_host(a);
      const std::vector<tj::HostTensor> on = run(g, fetches, hf, on_vars);
      std::vector<tj::HostTensor> off;
      {
        ScopedEnv unfused("TOWERJIT_REDUCTION_FINISHERS", "off");
        const tj::CudaProgram separate(g, fetches, true);
        CHECK(paths_of(separate, batch).finishing == 0);
        off = run(g, fetches, hf, off_vars);
      }
      check_same_bits(on, off);
      for (const auto& [name, t] : on_vars) {
        INFO(name);
        CHECK(std::memcmp(t.f32.data(), off_vars.at(name).f32.data(), t.f32.size() * sizeof(float)) == 0);
      }
      if (batch == 261)  // the fold is the last block's, whichever finishes last
        for (const char* seed : {"random:1", "random:2"}) {
          INFO("TOWERJIT_EMULATOR_SCHEDULE=" << seed);
          ScopedEnv schedule("TOWERJIT_EMULATOR_SCHEDULE", seed);
          tj::HostVariables shuffled_vars;
          for (const auto& [name, a] : vars) shuffled_vars[name] = to_host(a);
          check_same_bits(run(g, fetches, hf, shuffled_vars), on);
        }
    }
  // Every place a result is stored ran its finishers at least once.
  CHECK(seen.single > 0);
  CHECK(seen.combine > 0);
  CHECK(seen.one_pass > 0);
}
