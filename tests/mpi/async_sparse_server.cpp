// Sparse gradients pushed to the parameter server (runtime/towers/async_world.h): run by
// tests/mpi/mpi_cli.sh (case async_sparse_gradients) as
//   towerjit_mpi_async_sparse none_lost <towers per worker>
// under mpirun: an embedding [V, 4] whose loss is linear in the table, so whatever order the
// pushes arrive in, the table ends as its start minus every world tower's scaled step on the
// rows its slice read (V = 1, 7 and 127: rows read by several towers, and read twice within a
// slice); rank 0 checks the table and the apply count. And
//   towerjit_mpi_async_sparse train <file> [dense]
// alone or under mpirun with 1 tower per process: the model of tests/runtime/sparse_tower_model.h
// (V = 127) on Adam, whose sparse form (PyTorch's SparseAdam: rows not read keep their
// moments) differs from the dense one; rank 0 writes every variable's elements in hexadecimal
// floats to <file>, for towerjit_mpi_sparse_towers compare. A server with one worker applies
// in the order one process does: the two files are bitwise the same. And
//   towerjit_mpi_async_sparse replies
// under mpirun -np 3 (a server, two workers of one tower): a reply carries only the table's
// rows changed since that worker's last one, so the rows one worker writes must reach the
// other. Worker A (tower 0) writes row 2k at batch k, from a loss linear in it; worker B
// (tower 1) reads row 2(k - 2) at batch k, from a loss quadratic in it, so its gradient is
// that row's value as A left it. With max_staleness 0, B's push of batch k - 1 is applied only
// once A's batches up to k - 2 are, so its reply holds A's row whatever order the pushes come
// in: the table's end is known in closed form.
#include <cmath>
#include <cstdio>
#include <string>

#include "../runtime/sparse_tower_model.h"
#include "runtime/dist/world.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::testing::kSparseDim;
using tj::testing::kSparseReads;

namespace {

constexpr int64_t kExamples = 40, kBatch = 9;  // 5 batches a pass, the last of 4

tj::data::TensorDataset dataset(int64_t vocab) {
  return tj::data::TensorDataset(tj::testing::sparse_tower_batch(kExamples, vocab, 31));
}

int none_lost(int towers_per_worker) {
  const double lr = 0.5;
  int failures = 0;
  for (const int64_t vocab : {1, 7, 127}) {
    const tj::data::TensorDataset data = dataset(vocab);
    tj::Graph graph;
    tj::GraphScope use(graph);
    auto ids = tj::input("ids", {tj::kBatch, kSparseReads}, tj::DType::i32);
    auto c = tj::input("c", {tj::kBatch, kSparseReads, kSparseDim});
    auto loss = tj::mean(c * tj::embedding(ids, vocab, kSparseDim, "embed", {.sparse = true}));
    std::vector<tj::Device> devices;
    for (int i = 0; i < towers_per_worker; ++i) devices.push_back(tj::cpu(i));
    tj::TowerTrainer trainer(graph, loss, tj::Towers(devices).reduce(tj::AsyncApply{}), tj::sgd(lr));
    const tj::HostTensor first = trainer.variables().at("embed/embeddings");
    tj::data::BatchPipeline pipeline(data, {.batch = kBatch, .shuffle = false,
                                            .part = [&](int64_t rows) { return trainer.own_rows(rows); }});
    tj::fit(trainer, pipeline, {.epochs = 2});
    if (tj::dist::world().rank() != 0) continue;

    // Every world tower t applies -lr (1/N) c_p / (n_t 3 4) to the row of each read p of its slice.
    const int towers = trainer.world_layout().towers();
    const tj::HostTensor& id = data.array("ids");
    const tj::HostTensor& cs = data.array("c");
    std::vector<double> expected(first.f32.begin(), first.f32.end());
    int64_t batches = 0;
    for (int epoch = 0; epoch < 2; ++epoch)
      for (int64_t start = 0; start < kExamples; start += kBatch, ++batches) {
        int64_t example = start;
        for (const int64_t slice : tj::split_batch(std::min(kBatch, kExamples - start), towers, tj::Split::remainder_last)) {
          for (int64_t p = example * kSparseReads; p < (example + slice) * kSparseReads; ++p)
            for (int64_t d = 0; d < kSparseDim; ++d)
              expected[id.i32[p] * kSparseDim + d] -= lr / towers * cs.f32[p * kSparseDim + d] / (slice * kSparseReads * kSparseDim);
          example += slice;
        }
      }
    const tj::HostTensor& table = trainer.variables().at("embed/embeddings");
    double worst = 0;
    for (int64_t i = 0; i < table.size(); ++i)
      worst = std::max(worst, std::abs(table.f32[i] - expected[i]) / std::max(1.0, std::abs(expected[i])));
    // Each element is a sum of at most 2 x 40 x 3 float terms: far inside 1e-5.
    const bool ok = worst <= 1e-5 && trainer.applies() == batches * towers;
    if (!ok) ++failures;
    std::printf("V = %lld, %d towers: %lld applies (expected %lld), the table within %.2g%s\n",
                static_cast<long long>(vocab), towers, static_cast<long long>(trainer.applies()),
                static_cast<long long>(batches * towers), worst, ok ? "; ok" : "; FAIL");
  }
  return failures ? 1 : 0;
}

int train(const char* path, bool sparse) {
  const tj::data::TensorDataset data = dataset(127);
  tj::Graph graph;
  const tj::Tensor loss = tj::testing::sparse_tower_loss(graph, 127, sparse);
  tj::TowerTrainer trainer(graph, loss, tj::Towers({tj::cpu(0)}).reduce(tj::AsyncApply{}), tj::adam(0.05));
  tj::data::BatchPipeline pipeline(data, {.batch = kBatch, .shuffle = false,
                                          .part = [&](int64_t rows) { return trainer.own_rows(rows); }});
  tj::fit(trainer, pipeline, {.epochs = 2});
  if (tj::dist::world().rank() != 0) return 0;
  std::FILE* out = std::fopen(path, "w");
  for (const auto& [name, t] : trainer.variables())
    for (float v : t.f32) std::fprintf(out, "%s %a\n", name.c_str(), static_cast<double>(v));
  std::fclose(out);
  std::printf("%lld applies; ok\n", static_cast<long long>(trainer.applies()));
  return 0;
}

int replies() {
  constexpr int64_t kBatches = 6, kVocab = 2 * kBatches + 1, kDim = 3;
  const double lr = 0.25;
  // Batch k: example 0 (worker A) reads row 2k with c = 1, q = 0; example 1 (worker B) reads
  // row 2(k - 2) (the last row, which A never writes, before that) with c = 0, q = 1.
  tj::HostTensor ids(tj::Shape{2 * kBatches, 1}, tj::DType::i32), c(tj::Shape{2 * kBatches, 1, kDim}),
      q(tj::Shape{2 * kBatches, 1, kDim});
  for (int64_t k = 0; k < kBatches; ++k) {
    ids.i32[2 * k] = static_cast<int32_t>(2 * k);
    ids.i32[2 * k + 1] = static_cast<int32_t>(k >= 2 ? 2 * (k - 2) : kVocab - 1);
    for (int64_t d = 0; d < kDim; ++d) c.f32[2 * k * kDim + d] = 1, q.f32[(2 * k + 1) * kDim + d] = 1;
  }
  const tj::data::TensorDataset data(tj::HostFeeds{{"ids", ids}, {"c", c}, {"q", q}});
  tj::Graph graph;
  tj::GraphScope use(graph);
  auto id = tj::input("ids", {tj::kBatch, 1}, tj::DType::i32);
  auto cin = tj::input("c", {tj::kBatch, 1, kDim});
  auto qin = tj::input("q", {tj::kBatch, 1, kDim});
  auto e = tj::embedding(id, kVocab, kDim, "embed", {.sparse = true});
  auto loss = tj::mean(cin * e + qin * e * e);
  tj::TowerTrainer trainer(graph, loss, tj::Towers({tj::cpu(0)}).reduce(tj::AsyncApply{.max_staleness = 0}),
                           tj::sgd(lr));
  const tj::HostTensor first = trainer.variables().at("embed/embeddings");
  tj::data::BatchPipeline pipeline(data, {.batch = 2, .shuffle = false,
                                          .part = [&](int64_t rows) { return trainer.own_rows(rows); }});
  tj::fit(trainer, pipeline, {.epochs = 1});
  if (tj::dist::world().rank() != 0) return 0;
  if (trainer.world_layout().towers() != 2) {
    std::fprintf(stderr, "replies: run under mpirun -np 3 (two workers of one tower)\n");
    return 2;
  }
  // Each tower's gradient of mean(c e + q e^2) over its D elements, scaled by 1/2 (two towers).
  const double step = lr / 2 / kDim;
  std::vector<double> expected(first.f32.begin(), first.f32.end());
  for (int64_t k = 0; k < kBatches; ++k) {
    for (int64_t d = 0; d < kDim; ++d) expected[2 * k * kDim + d] -= step;  // A: c = 1
    const int64_t row = k >= 2 ? 2 * (k - 2) : kVocab - 1;
    for (int64_t d = 0; d < kDim; ++d) expected[row * kDim + d] -= step * 2 * expected[row * kDim + d];  // B
  }
  const tj::HostTensor& table = trainer.variables().at("embed/embeddings");
  double worst = 0;
  for (int64_t i = 0; i < table.size(); ++i) worst = std::max(worst, std::abs(table.f32[i] - expected[i]));
  // Each element takes at most three float updates of its value: a few roundings of it.
  const bool ok = worst <= 1e-6 && trainer.applies() == 2 * kBatches;
  std::printf("%lld applies, the table within %.2g of its closed form%s\n", static_cast<long long>(trainer.applies()),
              worst, ok ? "; ok" : "; FAIL");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  int code = 2;
  try {
    if (mode == "none_lost" && argc == 3) code = none_lost(std::stoi(argv[2]));
    else if (mode == "train" && (argc == 3 || argc == 4)) code = train(argv[2], argc == 3);
    else if (mode == "replies" && argc == 2) code = replies();
    else std::fprintf(stderr, "usage: %s none_lost <towers per worker> | train <file> [dense] | replies\n", argv[0]);
  } catch (const tj::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    code = 1;
  }
  if (code == 1) tj::dist::abort_world_on_error(code);
  return code;
}
