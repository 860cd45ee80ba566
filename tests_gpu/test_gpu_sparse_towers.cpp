// Sparse gradients on GPU towers: each GPU tower fetches an embedding's rows and values (never
// its [V, D] gradient) and the host concatenates them as it does for CPU towers
// (runtime/towers/sparse_reduction.h): for its apply with the variables in host memory, for
// every GPU's apply with the variables on the GPUs (runtime/towers/gpu_resident_sync.h). Checked against CPU towers
// on Adam, whose sparse form (PyTorch's SparseAdam) leaves a row's moments alone at the steps
// that do not read it, so a dense apply would train other weights.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_check.h"
#include "tests/runtime/sparse_tower_model.h"
#include "towerjit.h"

namespace tj = towerjit;

namespace {

constexpr int64_t kVocab = 37;  // 21 reads a step: most rows are skipped by some steps

tj::HostVariables train(const tj::Towers& towers, bool sparse, tj::TowerTrainerOptions options = {}) {
  tj::Graph g;
  const tj::Tensor loss = tj::testing::sparse_tower_loss(g, kVocab, sparse);
  tj::TowerTrainer trainer(g, loss, towers, tj::adam(0.05), options);
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

TEST_CASE("GPU: sync GPU towers with the variables on the GPUs concatenate sparse rows for the GPUs' applies",
          "[gpu]") {
  if (tj::testing::skip_unless_gpus(2)) return;
  // TOWERJIT_GPU_VARIABLES=on: the bias is summed on the GPUs (in-device, NCCL between gpu:0
  // and gpu:1, or copies to gpu:0 with TOWERJIT_NCCL=off); the table's rows and values come
  // down, are concatenated in tower order and go to each GPU's sparse apply. The first GPU's
  // copy follows the CPU towers' SparseAdam (7 examples: 3 + 4, and 2 + 2 + 3 over three
  // towers); a GPU's copy left behind would change its towers' next gradients, and so it.
  // The parameter-server variant: the table on one GPU by the seed's rule, applied there.
  const tj::TowerTrainerOptions on_gpus{.strategy = {.gpu_variables = true}};
  struct Case {
    std::vector<tj::Device> devices;
    const char* nccl;
    bool placed;  // the parameter-server variant: each variable on one GPU (sync_placed)
  };
  for (const Case& c : {Case{{tj::gpu(0), tj::gpu(0)}, "on", false}, Case{{tj::gpu(0), tj::gpu(1)}, "on", false},
                        Case{{tj::gpu(0), tj::gpu(1), tj::gpu(1)}, "off", false},
                        Case{{tj::gpu(0), tj::gpu(1), tj::gpu(1)}, "on", true}}) {
    const tj::testing::ScopedEnv use_nccl("TOWERJIT_NCCL", c.nccl);
    const tj::Towers gpus = c.placed ? tj::Towers(c.devices).variant(tj::SyncVariant::parameter_server)
                                     : tj::Towers(c.devices);
    std::string names;
    std::vector<tj::Device> cpus;
    for (const tj::Device& d : c.devices) {
      names += d.str() + " ";
      cpus.push_back(tj::cpu(static_cast<int>(cpus.size())));
    }
    INFO("towers " << names << "with TOWERJIT_NCCL=" << c.nccl << (c.placed ? ", placed" : ""));
    const tj::HostVariables cpu_sparse = train(tj::Towers(cpus), true);
    const tj::HostVariables gpu_sparse = train(gpus, true, on_gpus);
    for (const auto& [name, t] : cpu_sparse)
      for (int64_t i = 0; i < t.size(); ++i)
        CHECK(gpu_sparse.at(name).f32[i] == Approx(t.f32[i]).epsilon(1e-5).margin(1e-6));
    if (c.devices.size() == 2 && c.devices[1] == tj::gpu(0))  // the dense apply once: not the path above
      CHECK(largest_difference(gpu_sparse, train(gpus, false, on_gpus)) > 1e-3);
  }
}

TEST_CASE("GPU: async GPU towers with placed variables apply each tower's sparse rows on the variable's GPU",
          "[gpu]") {
  // One tower: its rows and values applied on gpu:0 (the seed's placement under 4 towers), as
  // one async CPU tower applies them in host memory (SparseAdam), and not as the dense apply.
  const tj::Towers cpu = tj::Towers{tj::cpu(0)}.reduce(tj::AsyncApply{});
  const tj::Towers gpu = tj::Towers{tj::gpu(0)}.reduce(tj::AsyncApply{});
  const tj::HostVariables cpu_sparse = train(cpu, true);
  const tj::HostVariables gpu_sparse = train(gpu, true);
  for (const auto& [name, t] : cpu_sparse)
    for (int64_t i = 0; i < t.size(); ++i)
      CHECK(gpu_sparse.at(name).f32[i] == Approx(t.f32[i]).epsilon(1e-5).margin(1e-6));
  CHECK(largest_difference(gpu_sparse, train(gpu, false)) > 1e-3);
  // Two and three towers sharing gpu:0, SGD on a loss linear in the table: whatever order the
  // towers apply in, the table's change is the sum of each tower's rows times lr / N / (n_i 3 4)
  // (tj_scale applies the 1/N to the values on the GPU).
  for (const int n : {2, 3}) {
    INFO(n << " towers");
    tj::Graph g;
    tj::GraphScope use(g);
    auto ids = tj::input("ids", {tj::kBatch, tj::testing::kSparseReads}, tj::DType::i32);
    auto c = tj::input("c", {tj::kBatch, tj::testing::kSparseReads, tj::testing::kSparseDim});
    auto loss = tj::mean(c * tj::embedding(ids, kVocab, tj::testing::kSparseDim, "embed"));
    tj::TowerTrainer trainer(g, loss, tj::Towers(std::vector<tj::Device>(n, tj::gpu(0))).reduce(tj::AsyncApply{}),
                             tj::sgd(0.5));
    const tj::HostTensor first = trainer.variables().at("embed/embeddings");
    std::vector<double> expected(first.f32.begin(), first.f32.end());
    const int64_t per_example = tj::testing::kSparseReads * tj::testing::kSparseDim;
    for (int step = 0; step < 3; ++step) {
      const tj::HostFeeds batch = tj::testing::sparse_tower_batch(8, kVocab, 600 + step);
      int64_t example = 0;
      for (const int64_t slice : trainer.step(batch).slices) {
        for (int64_t p = example * tj::testing::kSparseReads; p < (example + slice) * tj::testing::kSparseReads; ++p)
          for (int64_t d = 0; d < tj::testing::kSparseDim; ++d)
            expected[batch.at("ids").i32[p] * tj::testing::kSparseDim + d] -=
                0.5 / n * batch.at("c").f32[p * tj::testing::kSparseDim + d] / (slice * per_example);
        example += slice;
      }
    }
    const tj::HostTensor& table = trainer.variables().at("embed/embeddings");
    for (int64_t i = 0; i < table.size(); ++i) CHECK(table.f32[i] == Approx(expected[i]).epsilon(1e-5).margin(1e-6));
  }
}
