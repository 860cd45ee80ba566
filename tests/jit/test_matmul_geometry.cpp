// A batch of products sharing their right operand folds into one product of stacked rows
// (jit/kir/matmul_geometry.h), and only then; through the CPU JIT the folded products match the
// reference at odd sizes, with and without a pool.
#include <catch2/catch.hpp>

#include "jit/kir/matmul_geometry.h"
#include "jit/passes/pipeline.h"
#include "jit/reference/interpreter.h"
#include "jit_check.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Shape;
using namespace tj::testing;

namespace {

tj::kir::MatMulGeometry geometry(bool ta, bool tb, const Shape& a, const Shape& b, const Shape& out, bool* folded) {
  tj::kir::LibraryCall c{tj::Op::MatMul};
  c.transpose_a = ta, c.transpose_b = tb;
  tj::kir::MatMulGeometry g = tj::kir::matmul_geometry(c, a, b, out);
  *folded = tj::kir::fold_batches_into_rows(c, g);
  return g;
}

}  // namespace

TEST_CASE("matmul geometry: products sharing the right operand fold into one of stacked rows", "[jit][matmul]") {
  bool folded = false;
  auto g = geometry(false, false, Shape{7, 5, 3}, Shape{3, 4}, Shape{7, 5, 4}, &folded);
  CHECK(folded);
  CHECK((g.batches == 1 && g.m == 35 && g.n == 4 && g.k == 3 && g.lda == 3 && g.ldb == 4));
  g = geometry(false, true, Shape{2, 7, 5, 3}, Shape{1, 1, 4, 3}, Shape{2, 7, 5, 4}, &folded);  // size-1 axes of b
  CHECK(folded);
  CHECK((g.batches == 1 && g.m == 70 && g.ldb == 3));
  geometry(false, false, Shape{7, 5, 3}, Shape{7, 3, 4}, Shape{7, 5, 4}, &folded);  // b batched too
  CHECK_FALSE(folded);
  geometry(true, false, Shape{7, 3, 5}, Shape{3, 4}, Shape{7, 5, 4}, &folded);  // a read transposed
  CHECK_FALSE(folded);
  geometry(false, false, Shape{1, 5, 3}, Shape{7, 3, 4}, Shape{7, 5, 4}, &folded);  // a broadcast, b batched
  CHECK_FALSE(folded);
  geometry(false, false, Shape{5, 3}, Shape{3, 4}, Shape{5, 4}, &folded);  // one product: nothing to fold
  CHECK_FALSE(folded);
}

TEST_CASE("matmul: a dense layer over B x T x D (folded products) matches the reference", "[cpu][jit][matmul]") {
  for (int64_t t : {1, 7, 127})
    for (int64_t batch : {1, 7}) {
      tj::Graph g;
      tj::GraphScope use(g);
      auto x = tj::input("x", {kBatch, t, 9});
      auto w = tj::input("w", {9, 5});
      auto wt = tj::input("wt", {5, 9});
      auto y = tj::matmul(x, w);
      auto yt = tj::matmul(x, tj::transpose(wt, {1, 0}));
      INFO("T = " << t << ", batch " << batch);
      require_jit_matches(g, {y, yt},
                          {{"x", random_array({batch, t, 9}, 3, -2, 2)}, {"w", random_array({9, 5}, 4, -2, 2)},
                           {"wt", random_array({5, 9}, 5, -2, 2)}},
                          {}, "dense over [B,T,D]");
    }
}

TEST_CASE("a weight's gradient over B x T x D is one product with the batches summed, no sum kernel", "[jit][matmul][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 7, 9});
  auto w = tj::input("w", {9, 5});
  auto y = tj::matmul(x, w);
  auto loss = tj::sum(y * y);
  auto dw = tj::grad(loss, {w})[0];
  const auto lowered = tj::lower_graph(g, {dw.id()}, {});
  const std::string text = tj::kir::to_string(lowered.program);
  INFO(text);
  CHECK(text.find("(batches summed)") != std::string::npos);
  for (const auto& k : lowered.program.kernels) CHECK(k.reduce_axes != std::vector<int>{0});  // no batch sum left
  for (int64_t batch : {1, 7})
    require_jit_matches(g, {dw}, {{"x", random_array({batch, 7, 9}, 3, -2, 2)}, {"w", random_array({9, 5}, 4, -2, 2)}},
                        {}, "dW over [B,T,D], batch " + std::to_string(batch));
}
