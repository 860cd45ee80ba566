// Async towers across processes lose no update: run under mpirun (tests/mpi/mpi_cli.sh) as
//   towerjit_mpi_async_check <towers per worker> [max staleness]
// Rank 0 serves the variables, the other ranks' towers push to it. The model's loss is the
// batch mean of x . w, whose gradient does not depend on w, so whatever order the pushes
// arrive in, w ends as the sum of every tower's scaled step; rank 0 checks it, the apply count,
// the staleness report, and that a hook using the trainer sees exactly the applies of the
// batches before it. Exit 0 on success; otherwise rank 0 prints the failures and exits 1.
#include <cmath>
#include <optional>
#include <cstdio>
#include <random>
#include <string>

#include "runtime/dist/world.h"
#include "towerjit.h"

namespace tj = towerjit;

namespace {

// Every third step, and at epoch ends, records the applies it sees.
struct QuietProbe : tj::Hook {
  std::vector<std::pair<int64_t, int64_t>> seen;
  void after_step(tj::TowerTrainer& trainer, const tj::StepEvent& e) override {
    if (uses_trainer_at(e)) seen.push_back({e.step, trainer.applies()});
  }
  bool uses_trainer_at(const tj::StepEvent& e) const override { return e.step % 3 == 0; }
};

int check(int towers_per_worker, std::optional<int64_t> bound) {
  tj::dist::Transport& world = tj::dist::world();
  const int64_t n = 70, batch = 9;
  tj::data::Dataset data{tj::HostTensor({n, 784}), tj::HostTensor({n}, tj::DType::i32)};
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> u(0, 1);
  for (float& v : data.images.f32) v = u(rng);
  for (int32_t& l : data.labels.i32) l = 0;

  tj::Graph graph;
  tj::GraphScope use(graph);
  auto image = tj::input("image", {tj::kBatch, 784});
  auto w = tj::variable("w", {784, 1}, {.init = tj::init::zeros()});
  std::vector<tj::Device> devices;
  for (int i = 0; i < towers_per_worker; ++i) devices.push_back(tj::cpu(i));
  const double lr = 0.05;
  tj::TowerTrainer trainer(graph, tj::mean(tj::matmul(image, w)), tj::Towers(devices).reduce(tj::AsyncApply{.max_staleness = bound}),
                           tj::sgd(lr));
  tj::data::BatchPipeline pipeline(data, {.batch = batch, .shuffle = false,
                                          .part = [&](int64_t rows) { return trainer.own_rows(rows); }});
  QuietProbe probe;
  tj::fit(trainer, pipeline, {.epochs = 2, .hooks = {&probe}});
  if (world.rank() != 0) return 0;

  // The expected w: every world tower t applies -lr * (1/N) * its slice's mean, once per batch.
  const int towers = trainer.world_layout().towers();
  std::vector<double> expected(784, 0.0);
  int64_t batches = 0;
  for (int e = 0; e < 2; ++e)
    for (int64_t first = 0; first < n; first += batch, ++batches) {
      int64_t row = first;
      for (int64_t slice : tj::split_batch(std::min(batch, n - first), towers, tj::Split::remainder_last)) {
        for (int j = 0; j < 784; ++j) {
          double mean = 0;
          for (int64_t r = row; r < row + slice; ++r) mean += data.images.f32[r * 784 + j];
          expected[j] -= lr / towers * mean / slice;
        }
        row += slice;
      }
    }
  int failures = 0;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    ++failures;
  };
  const auto report = trainer.async_report();
  if (trainer.applies() != batches * towers)
    fail("applies " + std::to_string(trainer.applies()) + ", expected " + std::to_string(batches * towers));
  if (report.applies != batches * towers) fail("the report counts " + std::to_string(report.applies) + " applies");
  for (const auto& [step, applies] : probe.seen)
    if (applies != step * towers)
      fail("at step " + std::to_string(step) + " the hook saw " + std::to_string(applies) + " applies, expected " +
           std::to_string(step * towers));
  if (probe.seen.size() != static_cast<size_t>(batches / 3)) fail("the hook ran " + std::to_string(probe.seen.size()) + " times");
  double worst = 0;
  for (int j = 0; j < 784; ++j) {
    const double got = trainer.variables().at("w").f32[j];
    worst = std::max(worst, std::abs(got - expected[j]) / std::max(1e-6, std::abs(expected[j])));
  }
  if (bound && report.max_lead > *bound)
    fail("a tower led the slowest by " + std::to_string(report.max_lead) + " applies, past the bound " + std::to_string(*bound));
  if (worst > 1e-4) fail("w is off by a relative " + std::to_string(worst) + " (an update lost or applied twice)");
  std::printf("%d workers, %d towers: %lld applies, staleness mean %.2f, max %lld, largest lead %lld; w within %.2g%s\n",
              world.size() - 1, towers, static_cast<long long>(report.applies), report.mean_staleness,
              static_cast<long long>(report.max_staleness), static_cast<long long>(report.max_lead), worst,
              failures ? "" : "; ok");
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int code = check(argc > 1 ? std::stoi(argv[1]) : 1,
                           argc > 2 ? std::optional<int64_t>(std::stoll(argv[2])) : std::nullopt);
    if (code) tj::dist::abort_world_on_error(code);
    return code;
  } catch (const tj::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    tj::dist::abort_world_on_error(1);
    return 1;
  }
}
