// The model the sparse-tower tests train: an embedding [V, 4] read by ids [B, 3] plus a bias,
// loss mean(c h + h^2 / 2) with h = embedding(ids) + bias: d loss / d h = (c + h) / (B 3 4),
// so the table's gradient is a sum of per-read terms whose sizes the tests can bound.
#pragma once

#include <cmath>
#include <random>

#include "towerjit.h"

namespace towerjit::testing {

inline constexpr int64_t kSparseReads = 3, kSparseDim = 4;

// The loss, built in `graph`; `sparse`: the embedding's gradient as rows and values.
inline Tensor sparse_tower_loss(Graph& graph, int64_t vocab, bool sparse) {
  GraphScope use(graph);
  auto ids = input("ids", {kBatch, kSparseReads}, DType::i32);
  auto c = input("c", {kBatch, kSparseReads, kSparseDim});
  auto h = embedding(ids, vocab, kSparseDim, "embed", {.sparse = sparse}) +
           variable("bias", {kSparseDim}, {.init = init::uniform(-1, 1)});
  return mean(c * h + 0.5 * h * h);
}

// `n` examples: ids drawn from [0, vocab), the first one repeated as the last read (a duplicate
// row within a tower and, with several towers, across them), c uniform in [-1, 1).
inline HostFeeds sparse_tower_batch(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  HostTensor ids({n, kSparseReads}, DType::i32), c({n, kSparseReads, kSparseDim});
  for (int32_t& v : ids.i32) v = static_cast<int32_t>(rng() % vocab);
  ids.i32.back() = ids.i32.front();
  for (float& v : c.f32) v = u(rng);
  return {{"ids", ids}, {"c", c}};
}

}  // namespace towerjit::testing
