// The reference interpreter's values for the sequence ops, against values worked out by hand:
// iota along each axis, causal masks and tril, gather along an outer and an inner axis, and
// the gather's gradient summing every slice into its row (rows read twice get both).
#include <catch2/catch.hpp>

#include "dsl/autodiff.h"
#include "dsl/sequence.h"
#include "jit/reference/interpreter.h"
#include "tests/reference/value_test_util.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::reference::Array;
using tj::reference::Feeds;
using namespace tj::reference::testing;

TEST_CASE("iota counts along its axis and causal_mask and tril keep the lower triangle", "[reference][sequence]") {
  tj::Graph g;
  tj::GraphScope use(g);
  require_values(eval(tj::iota({2, 3}, 0)), {2, 3}, {0, 0, 0, 1, 1, 1});
  require_values(eval(tj::iota({2, 3}, -1, tj::DType::f32)), {2, 3}, {0, 1, 2, 0, 1, 2});
  require_values(eval(tj::arange(4)), {4}, {0, 1, 2, 3});
  auto x = tj::input("x", {kBatch, 2});
  Feeds f{{"x", iota({3, 2})}};
  require_values(eval(tj::iota({kBatch, 2}, 0) + tj::cast(x * 0, tj::DType::i32), f), {3, 2}, {0, 0, 1, 1, 2, 2});
  require_values(eval(tj::causal_mask(3)), {3, 3}, {1, 0, 0, 1, 1, 0, 1, 1, 1});
  require_values(eval(tj::causal_mask(1)), {1, 1}, {1});
  auto m = tj::input("m", {2, 3});  // [[1,2,3],[4,5,6]]
  require_values(eval(tj::tril(m), {{"m", iota({2, 3})}}), {2, 3}, {1, 0, 0, 4, 5, 0});
}

TEST_CASE("gather takes rows along an outer or an inner axis", "[reference][sequence]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto table = tj::input("table", {3, 2});  // rows [1,2], [3,4], [5,6]
  auto ids = tj::input("ids", {2, 2}, tj::DType::i32);
  Feeds f{{"table", iota({3, 2})}, {"ids", Array({2, 2}, {2, 0, 2, 1}, tj::DType::i32)}};
  require_values(eval(tj::gather(table, ids), f), {2, 2, 2}, {5, 6, 1, 2, 5, 6, 3, 4});
  auto cube = tj::input("cube", {2, 3, 2});  // [o][r][i] = 1 + 6o + 2r + i
  auto pick = tj::input("pick", {2}, tj::DType::i32);
  Feeds fc{{"cube", iota({2, 3, 2})}, {"pick", Array({2}, {1, 1}, tj::DType::i32)}};
  require_values(eval(tj::gather(cube, pick, 1), fc), {2, 2, 2}, {3, 4, 3, 4, 9, 10, 9, 10});
  require_values(eval(tj::gather(cube, pick, -1), fc), {2, 3, 2}, {2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12});
}

TEST_CASE("a gather's gradient adds each slice into its row", "[reference][sequence]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto table = tj::input("table", {4, 2});
  auto ids = tj::input("ids", {3}, tj::DType::i32);
  auto dy = tj::input("dy", {3, 2});  // [1,2], [3,4], [5,6]
  auto y = tj::gather(table, ids);
  auto dtable = tj::grad(tj::sum(y * dy), {table})[0];
  Feeds f{{"table", Array({4, 2})}, {"ids", Array({3}, {2, 0, 2}, tj::DType::i32)}, {"dy", iota({3, 2})}};
  // Row 0 gets slice 1; row 2 gets slices 0 and 2; rows 1 and 3 nothing.
  require_values(eval(dtable, f), {4, 2}, {3, 4, 0, 0, 6, 8, 0, 0});
}
