// A ReLU's mask taken into the max pool gradient after it (jit/passes/mask_pool_grads.h): what
// the pass rewrites and what it leaves, the value bit for bit the same as the select it
// replaces (the reference interpreter on the graph before and after), and what the step's
// kernels no longer read. The results against the reference on the CPU and the emulated GPU are
// tests/jit/graph_cases.h's relu_then_pools.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "epilogue_cases.h"
#include "jit/kir/traffic.h"
#include "jit/passes/mask_pool_grads.h"
#include "jit/reference/interpreter.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Op;
using tj::Tensor;
using namespace tj::testing;

namespace {

int count_ops(const tj::Graph& g, Op op, bool relu_mask) {
  int n = 0;
  for (int id = 0; id < g.size(); ++id) n += g.node(id).op == op && g.node(id).attrs.relu_mask == relu_mask;
  return n;
}

// Integers in [-2, 2], and a NaN every 17th point: ties in the windows, zeros at the ReLU.
tj::reference::Array awkward(const tj::Shape& shape, uint32_t seed) {
  tj::reference::Array a = random_array(shape, seed, -2.5, 2.5);
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = i % 17 == 5 ? std::nan("") : std::round(a.data[i]);
  return a;
}

bool same_bits(const tj::reference::Array& a, const tj::reference::Array& b) {
  if (a.data.size() != b.data.size()) return false;
  for (size_t i = 0; i < a.data.size(); ++i) {
    const float x = static_cast<float>(a.data[i]), y = static_cast<float>(b.data[i]);
    if (std::memcmp(&x, &y, sizeof x) != 0) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("mask pool grads: a ReLU's mask before a max pool goes into the pool gradient, the same bits",
          "[cpu][jit]") {
  for (int kernel : {2, 3}) {
    INFO("kernel " << kernel);
    tj::Graph g;
    tj::GraphScope use(g);
    const Tensor x = tj::input("x", {kBatch, 2, 7, 6});
    const Tensor pooled = tj::max_pool2d(tj::relu(x), {.kernel = kernel, .stride = 2, .pad = kernel == 3 ? 1 : 0});
    const Tensor w = tj::input("w", pooled.shape());
    const Tensor dx = tj::grad(tj::sum(pooled * w), {x})[0];
    tj::Rewritten r = mask_pool_grads(g);
    const std::vector<Tensor> fetched = tj::remap_tensors(r, {dx});
    // The rewritten gradient reaches x through the masked pool gradient alone.
    CHECK(count_ops(r.graph, Op::MaxPool2DGrad, true) == 1);
    CHECK(r.graph.node(fetched[0].id()).op == Op::MaxPool2DGrad);
    for (int64_t batch : {1, 3}) {
      tj::reference::Feeds feeds{{"x", awkward({batch, 2, 7, 6}, 3 + kernel)},
                                 {"w", random_array(pooled.shape().bind(batch), 9)}};
      tj::reference::Variables vars;
      const auto before = tj::reference::run(g, {dx}, feeds, vars);
      const auto after = tj::reference::run(r.graph, fetched, feeds, vars);
      CHECK(same_bits(before[0], after[0]));
    }
  }
}

TEST_CASE("mask pool grads: a ReLU output read besides the pool is left as written, a fetched pool gradient unmasked",
          "[cpu][jit]") {
  {
    tj::Graph g;
    tj::GraphScope use(g);
    const Tensor x = tj::input("x", {kBatch, 2, 6, 6});
    const Tensor r = tj::relu(x);
    const Tensor pooled = tj::max_pool2d(r);
    // The ReLU's gradient masks the pool gradient plus the other branch's: no pattern.
    tj::grad(tj::sum(pooled * pooled) + tj::sum(r * r), {x});
    CHECK(count_ops(mask_pool_grads(g).graph, Op::MaxPool2DGrad, true) == 0);
  }
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 2, 6, 6});
  const Tensor r = tj::relu(x);
  const Tensor pooled = tj::max_pool2d(r);
  const std::vector<Tensor> grads = tj::grad(tj::sum(pooled * pooled), {x, r});  // d/dr: the pool gradient
  tj::Rewritten out = mask_pool_grads(g);
  const std::vector<Tensor> fetched = tj::remap_tensors(out, grads);
  CHECK(out.graph.node(fetched[0].id()).attrs.relu_mask);
  CHECK_FALSE(out.graph.node(fetched[1].id()).attrs.relu_mask);
  tj::reference::Feeds feeds{{"x", awkward({3, 2, 6, 6}, 21)}};
  tj::reference::Variables vars;
  const auto before = tj::reference::run(g, grads, feeds, vars);
  const auto after = tj::reference::run(out.graph, fetched, feeds, vars);
  CHECK(same_bits(before[0], after[0]));
  CHECK(same_bits(before[1], after[1]));
}

TEST_CASE("mask pool grads: the backward after a ReLU and a pool reads the pool gradient alone", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 3, 8, 8});
  const Tensor r = tj::relu(x * 2.0);
  const Tensor pooled = tj::max_pool2d(r);
  const Tensor dx = tj::grad(tj::sum(pooled * pooled), {x})[0];
  const tj::kir::Program p = lower(g, {dx});
  INFO(tj::kir::to_string(p));
  int relu_out = -1, masked_calls = 0;
  for (const tj::kir::LibraryCall& c : p.calls) {
    if (c.op == Op::MaxPool2D) relu_out = c.inputs[0];
    masked_calls += c.op == Op::MaxPool2DGrad && c.attrs.relu_mask;
  }
  REQUIRE(relu_out >= 0);
  CHECK(masked_calls == 1);
  // The ReLU's output is read by the pool and its gradient, and by no loop kernel.
  for (const tj::kir::Kernel& k : p.kernels) CHECK_FALSE(tj::kir::loaded_buffers(k).count(relu_out));
}
