// Sparse gradients across processes (runtime/towers/sparse_reduction.h): run under mpirun by
// tests/mpi/mpi_cli.sh (case sparse_gradients_across_processes) as
//   towerjit_mpi_sparse_towers train <towers per process> <file> [rules|gpus]
// which trains the embedding model of tests/runtime/sparse_tower_model.h (V = 7 and 127, SGD,
// 10 steps of 11 examples over the world's towers: an uneven split) and writes, from rank 0,
// every loss and every variable's elements in hexadecimal floats to <file> (with `rules`, the
// towers declared .with(variables("embed/*"), AsyncApply{}): the table applied from every
// tower's own rows, the bias averaged; with `gpus`, GPU towers with the variables on the GPUs,
// whose rows and values are concatenated on the host for every GPU's apply); and
//   towerjit_mpi_sparse_towers compare <file a> <file b> <relative tolerance>
// which exits 0 when the two files' numbers agree within the tolerance (0: bitwise).
// The training also checks that the apply was fed the world's reads ([11, 3, 4] values), not
// a [V, 4] table: the sparse path, across processes too.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "../runtime/sparse_tower_model.h"
#include "runtime/dist/world.h"
#include "towerjit.h"

namespace tj = towerjit;

namespace {

int train(int towers_per_process, const char* path, bool rules, bool gpus) {
  const int rank = tj::dist::world().rank();
  std::FILE* out = rank == 0 ? std::fopen(path, "w") : nullptr;
  for (const int64_t vocab : {7, 127}) {
    tj::Graph graph;
    const tj::Tensor loss = tj::testing::sparse_tower_loss(graph, vocab, true);
    std::vector<tj::Device> devices;
    for (int i = 0; i < towers_per_process; ++i) devices.push_back(gpus ? tj::gpu(i) : tj::cpu(i));
    tj::Towers towers(devices);
    if (rules) towers = towers.with(tj::variables("embed/*"), tj::AsyncApply{});
    tj::TowerTrainer trainer(graph, loss, towers, tj::sgd(0.5), {.strategy = {.gpu_variables = gpus}});
    for (int step = 0; step < 10; ++step) {
      const double l = trainer.step(tj::testing::sparse_tower_batch(11, vocab, 70 + step)).loss;
      // (The GPUs' reduced gradients never come to the host whole: no last_gradients().)
      const tj::HostTensor* fed = rules || gpus ? nullptr : trainer.last_gradients().at("embed/embeddings");
      if (fed && fed->shape != tj::Shape{11, tj::testing::kSparseReads, tj::testing::kSparseDim}) {
        std::printf("rank %d: FAIL: the apply was fed %s, not the world's [11,3,4] reads\n", rank, fed->shape.str().c_str());
        return 1;
      }
      if (out) std::fprintf(out, "loss %a\n", l);
    }
    for (const auto& [name, t] : trainer.variables())
      for (float v : t.f32)
        if (out) std::fprintf(out, "%s %a\n", name.c_str(), static_cast<double>(v));
  }
  if (out) std::fclose(out);
  std::printf("rank %d: ok\n", rank);
  return 0;
}

int compare(const char* a, const char* b, double tolerance) {
  std::ifstream fa(a), fb(b);
  std::string na, nb;
  std::string va, vb;
  int lines = 0;
  while (fa >> na >> va) {
    if (!(fb >> nb >> vb) || na != nb) {
      std::printf("FAIL: %s and %s differ in layout at line %d\n", a, b, lines + 1);
      return 1;
    }
    const double x = std::strtod(va.c_str(), nullptr), y = std::strtod(vb.c_str(), nullptr);
    if (std::abs(x - y) > tolerance * std::max(1.0, std::abs(x)) || (tolerance == 0 && va != vb)) {
      std::printf("FAIL: %s: %.9g against %.9g (line %d), beyond %g\n", na.c_str(), x, y, lines + 1, tolerance);
      return 1;
    }
    ++lines;
  }
  if (fb >> nb || lines == 0) {
    std::printf("FAIL: %s and %s hold different numbers of values\n", a, b);
    return 1;
  }
  std::printf("%d values agree within %g\n", lines, tolerance);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "train" && (argc == 4 || argc == 5))
    return train(std::atoi(argv[2]), argv[3], argc == 5 && std::string(argv[4]) == "rules",
                 argc == 5 && std::string(argv[4]) == "gpus");
  if (mode == "compare" && argc == 5) return compare(argv[2], argv[3], std::atof(argv[4]));
  std::fprintf(stderr, "usage: %s train <towers per process> <file> | compare <a> <b> <tolerance>\n", argv[0]);
  return 2;
}
