// Reduction finishers (jit/passes/reduction_finishers.h): which kernels the pass runs inside the
// reduction before them, and which it leaves as launches of their own because running them
// there would read a value another thread has not stored yet, write under a reduction still
// reading, or put many points on a few threads. The results on a GPU are
// tests_gpu/test_gpu_reduction_finishers.cpp's.
#include <catch2/catch.hpp>

#include "epilogue_cases.h"
#include "jit/passes/reduction_finishers.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

int finished_kernels(const tj::kir::Program& p) {
  int n = 0;
  for (const tj::kir::Kernel& k : p.kernels) n += static_cast<int>(k.finishers.size());
  return n;
}

// Batch norm in training over [B, 3, 5, 4], its ReLU weighed into a loss, and the gradients.
std::vector<Tensor> batch_norm_step() {
  const Tensor x = tj::input("x", {kBatch, 3, 5, 4});
  const Tensor y = tj::relu(tj::batch_norm(x, /*training=*/true, "bn"));
  const Tensor w = tj::input("w", y.shape());
  std::vector<Tensor> wrt = tj::trainable_variables();
  wrt.push_back(x);
  return tj::grad(tj::sum(y * w), wrt);
}

// The first reduction step whose next step is a loop kernel the pass attaches: the indices of
// both kernels.
std::pair<int, int> first_finished_pair(const tj::kir::Program& p) {
  for (size_t i = 0; i + 1 < p.steps.size(); ++i) {
    const tj::kir::Step &a = p.steps[i], &b = p.steps[i + 1];
    if (a.kind != tj::kir::Step::Kind::kernel || b.kind != tj::kir::Step::Kind::kernel) continue;
    tj::kir::Program two = p;
    two.steps = {a, b};
    if (finished_kernels(tj::attach_reduction_finishers(two)) > 0) return {a.index, b.index};
  }
  FAIL("no reduction in the program takes a finisher");
  return {-1, -1};
}

// Whether the pass attaches kernel `next` to reduction `r` once `change` has edited `next`.
template <typename Change>
bool attaches_after(const tj::kir::Program& p, std::pair<int, int> pair, Change change) {
  tj::kir::Program two = p;
  two.steps = {{tj::kir::Step::Kind::kernel, pair.first}, {tj::kir::Step::Kind::kernel, pair.second}};
  change(two.kernels[pair.second], two.kernels[pair.first]);
  return finished_kernels(tj::attach_reduction_finishers(two)) > 0;
}

}  // namespace

TEST_CASE("reduction finishers: batch norm's per-channel kernels run in its reductions", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const tj::kir::Program p = lower(g, batch_norm_step());
  const tj::kir::Program f = tj::attach_reduction_finishers(p);
  INFO("before:\n" << tj::kir::to_string(p) << "\nafter:\n" << tj::kir::to_string(f));
  // The forward's statistics take the rsqrt and the moving statistics; the backward's sums take
  // the gradients of gamma and beta.
  int finishing = 0;
  for (const tj::kir::Kernel& k : f.kernels) finishing += !k.finishers.empty();
  CHECK(finishing >= 2);
  CHECK(kernel_steps(f) == kernel_steps(p) - finishing);
  for (const tj::kir::Kernel& k : f.kernels)
    for (const tj::kir::Kernel& fin : k.finishers) {
      CHECK(k.reduce != tj::Op::Constant);
      CHECK(fin.reduce == tj::Op::Constant);
      CHECK(tj::kir::points_of(fin.space) == tj::kir::Affine{3, 0});  // one point a channel
    }
  // Every buffer the program reads or writes is still read or written by some step.
  CHECK(f.buffers.size() == p.buffers.size());
  CHECK(tj::kir::to_string(f).find("finisher") != std::string::npos);
}

TEST_CASE("reduction finishers: a kernel that would race with the reduction stays a launch of its own", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const tj::kir::Program p = lower(g, batch_norm_step());
  const std::pair<int, int> pair = first_finished_pair(p);
  CHECK(attaches_after(p, pair, [](tj::kir::Kernel&, tj::kir::Kernel&) {}));
  // Reading a result at another output's point: that output's thread may not have stored it.
  CHECK_FALSE(attaches_after(p, pair, [&](tj::kir::Kernel& next, tj::kir::Kernel& r) {
    const int result = r.accesses[r.outputs[0].access].buffer;
    for (tj::kir::Access& a : next.accesses)
      if (a.buffer == result) a.offset.c += 1;
  }));
  // Writing a buffer the reduction reads: other blocks may still be reading it.
  CHECK_FALSE(attaches_after(p, pair, [&](tj::kir::Kernel& next, tj::kir::Kernel& r) {
    int input = -1;
    for (const tj::kir::Expr& e : r.exprs)
      if (e.kind == tj::kir::Expr::Kind::load && input < 0) input = r.accesses[e.access].buffer;
    next.accesses[next.outputs[0].access].buffer = input;
  }));
  // Another reduction is not a finisher.
  CHECK_FALSE(attaches_after(p, pair, [](tj::kir::Kernel& next, tj::kir::Kernel&) {
    next.reduce = tj::Op::ReduceSum;
    next.reduce_axes = {0};
    next.outputs[0].reduce = tj::Op::ReduceSum;
  }));
}

TEST_CASE("reduction finishers: at most kMaxFinisherPoints outputs, and none over the batch", "[cpu][jit]") {
  for (const int64_t columns : {tj::kMaxFinisherPoints, tj::kMaxFinisherPoints + 1}) {
    INFO(columns << " columns");
    tj::Graph g;
    tj::GraphScope use(g);
    const Tensor x = tj::input("x", {kBatch, columns});
    const Tensor s = tj::sum(x, {0});
    const tj::kir::Program p = lower(g, {tj::exp(s) * 2});
    REQUIRE(kernel_steps(p) == 2);  // the column sums, then the elementwise kernel over them
    CHECK(finished_kernels(tj::attach_reduction_finishers(p)) == (columns <= tj::kMaxFinisherPoints ? 1 : 0));
  }
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 8});
  const tj::kir::Program p = lower(g, {tj::exp(tj::sum(x, {1})) * 2});  // one output a row: B of them
  REQUIRE(kernel_steps(p) == 2);
  CHECK(finished_kernels(tj::attach_reduction_finishers(p)) == 0);
}
