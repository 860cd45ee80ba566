// The mistakes only a world of several processes allows, each named at the caller's line: run
// under mpirun -np 2 (tests/mpi/mpi_cli.sh, case trainer_misuse_is_named). Every rank makes
// each mistake (none reaches a collective) and prints what it got; exit 0 when every message
// names what, where and the fix, else 1 with the failures.
//   - TowerTrainer::step() and run_async() with async towers across processes (fit() runs
//     the parameter server);
//   - a sync step fed the whole batch where this process's rows were due (own_rows()).
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "runtime/dist/world.h"
#include "towerjit.h"

namespace tj = towerjit;

namespace {

int failures = 0;

// Runs `mistake`, which must raise a towerjit::Error holding every one of `parts`.
void expect_error(const char* what, const std::function<void()>& mistake, const std::vector<std::string>& parts) {
  try {
    mistake();
    std::printf("FAIL: %s: no error\n", what);
    ++failures;
  } catch (const tj::Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      if (message.find(part) == std::string::npos) {
        std::printf("FAIL: %s: no \"%s\" in: %s\n", what, part.c_str(), message.c_str());
        ++failures;
      }
    std::printf("%s\n", message.c_str());
  }
}

std::string here(int line) { return "tests/mpi/trainer_misuse.cpp:" + std::to_string(line); }

tj::HostFeeds rows(int64_t n) {
  tj::HostTensor image({n, 4});
  for (size_t i = 0; i < image.f32.size(); ++i) image.f32[i] = 0.25f * static_cast<float>(i % 7);
  return {{"image", image}};
}

// The batch mean of image . w, in `graph` (a trainer per graph).
tj::Tensor linear_loss(tj::Graph& graph) {
  tj::GraphScope use(graph);
  auto image = tj::input("image", {tj::kBatch, 4});
  auto w = tj::variable("w", {4, 1}, {.init = tj::init::zeros()});
  return tj::mean(tj::matmul(image, w));
}

}  // namespace

int main() {
  {
    tj::Graph graph;
    const tj::Tensor loss = linear_loss(graph);
    tj::TowerTrainer trainer(graph, loss, tj::Towers{tj::cpu(0)}.reduce(tj::AsyncApply{}), tj::sgd(0.1));
    // (Each mistake and its expected line on one line: the message names the mistake's line.)
    expect_error("step() with async towers", [&] { trainer.step(rows(8)); }, {"step: async towers across processes train through fit()", "call fit()", here(__LINE__)});
    expect_error("run_async() across processes", [&] { trainer.run_async(1, [](int, int) { return rows(4); }); }, {"run_async: async towers across processes train through fit(); call fit()", here(__LINE__)});
  }
  {
    tj::Graph graph;
    const tj::Tensor loss = linear_loss(graph);
    tj::TowerTrainer trainer(graph, loss, tj::Towers{tj::cpu(0)}, tj::sgd(0.1));
    // A batch of 16 over the world's 2 towers: this process's rows are 8 of them.
    expect_error("a sync step fed the whole batch", [&] { trainer.step(rows(16), {.whole_batch = 16}); }, {"step: fed 16 examples as this process's part of a batch of 16, but its towers' slices hold 8", "feed TowerTrainer::own_rows() of each batch", here(__LINE__)});
  }
  std::printf(failures ? "rank %d: %d failures\n" : "rank %d: ok\n", tj::dist::world().rank(), failures);
  return failures ? 1 : 0;
}
