// Fused max pools (jit/passes/fused_max_pools.h): which pools the pass computes in the kernel
// that makes their input, whose gradients it routes into their readers, and which it leaves to
// the library routines. The values, on a GPU against the reference and against the routines'
// bits, are tests_gpu/test_gpu_fused_max_pools.cpp's and graph_cases.h's.
#include <catch2/catch.hpp>

#include "epilogue_cases.h"
#include "tests/jit/cpu_test_env.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

// Loop kernels the steps run (a group's parts each) whose name holds `text` (a pool's producer:
// "_max_pool2d"; a gradient of its own: "_max_pool2d_grad", numbered after the first).
int kernels_named(const tj::kir::Program& p, const std::string& text) {
  int n = 0;
  for (const tj::kir::Step& s : p.steps)
    if (s.kind == tj::kir::Step::Kind::kernel)
      for (const tj::kir::Kernel* body : p.kernels[s.index].bodies()) n += body->name.find(text) != std::string::npos;
  return n;
}

// relu(x * s + r) over [B, 3, h, w], max pooled, weighed into a loss; the gradients of x and s.
struct PoolStep {
  Tensor x, pool_input, pool;
  std::vector<Tensor> grads;
};
PoolStep pool_step(int64_t h, int64_t w, tj::Pool2DOptions options = {}) {
  PoolStep p;
  p.x = tj::input("x", {kBatch, 3, h, w});
  const Tensor s = tj::input("s", {1, 3, 1, 1}), r = tj::input("r", {kBatch, 3, h, w});
  p.pool_input = tj::relu(p.x * s + r);
  p.pool = tj::max_pool2d(p.pool_input, options);
  p.grads = tj::grad(tj::sum(p.pool * tj::input("w", p.pool.shape())), {p.x, s});
  return p;
}

}  // namespace

TEST_CASE("fused max pools: computed where their input is made, gradients routed into their readers", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const PoolStep step = pool_step(6, 10);
  const std::vector<Tensor> fetches{step.pool, step.grads[0], step.grads[1]};
  const tj::kir::Program p = [&] {
    tj::test::ScopedEnv off("TOWERJIT_FUSED_MAX_POOLS", "off");
    return lower_for_gpu(g, fetches);
  }();
  const tj::kir::Program f = lower_for_gpu(g, fetches);
  INFO("before:\n" << tj::kir::to_string(p) << "\nafter:\n" << tj::kir::to_string(f));
  CHECK(calls_of(p, tj::Op::MaxPool2D) == 1);
  CHECK(calls_of(p, tj::Op::MaxPool2DGrad) == 1);
  CHECK(calls_of(f, tj::Op::MaxPool2D) == 0);
  CHECK(calls_of(f, tj::Op::MaxPool2DGrad) == 0);
  CHECK(kernels_named(f, "_max_pool2d") == 1);
  CHECK(kernels_named(f, "_max_pool2d_grad") == 0);  // in x's and s's gradients' kernels
  // The pool's input is stored by no step: the producer loops over the pooled points.
  int pooled_kernels = 0, split_kernels = 0;
  for (const tj::kir::Step& s : f.steps) {
    if (s.kind != tj::kir::Step::Kind::kernel) continue;
    const tj::kir::Kernel& k = f.kernels[s.index];
    pooled_kernels += k.space == tj::Shape{kBatch, 3, 3, 5};
    split_kernels += k.space == tj::Shape{kBatch, 3, 3, 2, 5, 2};
  }
  CHECK(pooled_kernels == 1);
  CHECK(split_kernels >= 2);  // x's gradient (elementwise) and s's (a sum per channel)
  CHECK(kernel_steps(f) == kernel_steps(p));  // the pool's gradient in both readers, no kernel of its own
}

TEST_CASE("fused max pools: other pools, and pools whose input is needed, stay library calls", "[cpu][jit]") {
  auto pools_left = [](const tj::Graph& g, const std::vector<Tensor>& fetches) {
    return calls_of(lower_for_gpu(g, fetches), tj::Op::MaxPool2D);
  };
  SECTION("an odd size: a row and a column outside every window") {
    tj::Graph g;
    tj::GraphScope use(g);
    const PoolStep step = pool_step(7, 9);
    CHECK(pools_left(g, {step.pool, step.grads[0]}) == 1);
  }
  SECTION("3x3 windows") {
    tj::Graph g;
    tj::GraphScope use(g);
    const PoolStep step = pool_step(6, 10, {.kernel = 3, .stride = 2, .pad = 1});
    CHECK(pools_left(g, {step.pool, step.grads[0]}) == 1);
  }
  SECTION("the pool's input fetched") {
    tj::Graph g;
    tj::GraphScope use(g);
    const PoolStep step = pool_step(6, 10);
    CHECK(pools_left(g, {step.pool, step.grads[0], step.pool_input}) == 1);
  }
  SECTION("the pool's input read by another op") {
    tj::Graph g;
    tj::GraphScope use(g);
    const PoolStep step = pool_step(6, 10);
    CHECK(pools_left(g, {step.pool, tj::sum(step.pool_input, {1})}) == 1);
  }
  SECTION("a pool of an input, made by no kernel") {
    tj::Graph g;
    tj::GraphScope use(g);
    const Tensor x = tj::input("x", {kBatch, 3, 6, 10});
    CHECK(pools_left(g, {tj::max_pool2d(x)}) == 1);
  }
}

TEST_CASE("fused max pools: a gradient that is fetched stays a kernel of its own", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 2, 4, 4});
  const Tensor pool_input = x * tj::input("s", {1, 2, 1, 1});
  const Tensor pool = tj::max_pool2d(pool_input);
  const Tensor loss = tj::sum(pool * tj::input("w", pool.shape()));
  const std::vector<Tensor> grads = tj::grad(loss, {pool_input, x});  // the pool's gradient itself, fetched
  const tj::kir::Program f = lower_for_gpu(g, {loss, grads[0], grads[1]});
  INFO(tj::kir::to_string(f));
  CHECK(calls_of(f, tj::Op::MaxPool2D) == 0);
  CHECK(calls_of(f, tj::Op::MaxPool2DGrad) == 0);
  CHECK(kernels_named(f, "_max_pool2d_grad") == 1);
}

TEST_CASE("fused max pools: a kernel reading two pools' gradients takes both", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 2, 4, 6});
  const Tensor a = tj::max_pool2d(tj::relu(x * tj::input("s", {1, 2, 1, 1}))), b = tj::max_pool2d(-x);
  const Tensor loss = tj::sum(a * tj::input("w", a.shape())) + tj::sum(b * b);
  const tj::kir::Program f = lower_for_gpu(g, {loss, tj::grad(loss, {x})[0]});
  INFO(tj::kir::to_string(f));
  CHECK(calls_of(f, tj::Op::MaxPool2DGrad) == 0);
  CHECK(calls_of(f, tj::Op::MaxPool2D) == 0);
  CHECK(kernels_named(f, "_max_pool2d_grad") == 0);
}
