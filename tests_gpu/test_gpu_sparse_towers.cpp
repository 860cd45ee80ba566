// Sparse gradients on GPU towers: with the variables in host memory, each GPU tower fetches an
// embedding's rows and values (never its [V, D] gradient) and the host concatenates and applies
// them as it does for CPU towers (runtime/towers/sparse_reduction.h). Checked against CPU towers
// on Adam, whose sparse form (PyTorch's SparseAdam) leaves a row's moments alone at the steps
// that do not read it, so a dense apply would train other weights.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>

#include "gpu_check.h"
#include "tests/runtime/sparse_tower_model.h"
#include "towerjit.h"

namespace tj = towerjit;

namespace {

constexpr int64_t kVocab = 37;  // 21 reads a step: most rows are skipped by some steps

tj::HostVariables train(const tj::Towers& towers, bool sparse) {
  tj::Graph g;
  const tj::Tensor loss = tj::testing::sparse_tower_loss(g, kVocab, sparse);
  tj::TowerTrainer trainer(g, loss, towers, tj::adam(0.05));
  for (int k = 0; k < 6; ++k) trainer.step(tj::testing::sparse_tower_batch(7, kVocab, 40 + k));
  return trainer.variables();
}

// The largest |a - b| over the embedding's elements.
double largest_difference(const tj::HostVariables& a, const tj::HostVariables& b) {
  const tj::HostTensor& x = a.at("embed/embeddings");
  const tj::HostTensor& y = b.at("embed/embeddings");
  double d = 0;
  for (int64_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(double(x.f32[i]) - y.f32[i]));
  return d;
}

}  // namespace

TEST_CASE("GPU: sparse gradients on GPU towers follow CPU towers' sparse apply (SparseAdam), uneven split",
          "[gpu]") {
  // 7 examples over two towers sharing gpu:0 (3 + 4, the default split), against two CPU towers.
  const tj::Towers cpus{tj::cpu(0), tj::cpu(1)};
  const tj::Towers gpus{tj::gpu(0), tj::gpu(0)};
  const tj::HostVariables cpu_sparse = train(cpus, true);
  const tj::HostVariables gpu_sparse = train(gpus, true);
  const tj::HostVariables gpu_dense = train(gpus, false);
  // Both towers' forward and backward are a few elementwise operations and one mean per read:
  // the GPU's and the CPU's agree to a few float32 roundings, and Adam's update, about lr per
  // step for a row read, carries them relative to it.
  for (const auto& [name, t] : cpu_sparse)
    for (int64_t i = 0; i < t.size(); ++i)
      CHECK(gpu_sparse.at(name).f32[i] == Approx(t.f32[i]).epsilon(1e-5).margin(1e-6));
  // The dense apply moves the rows at the steps that skip them (their moments decay but stay):
  // the sparse run above did not take that path.
  CHECK(largest_difference(gpu_sparse, gpu_dense) > 1e-3);
}
