// Fused max pools on the GPU (jit/passes/fused_max_pools.h): a residual block's
// relu(bn(conv(x)) + r), max pooled, computed over the pooled points with the window's winner
// stored as a code; the pool's gradient routed into batch norm's backward sums and elementwise
// kernels. Against the reference, moving statistics included, and the same bits as the library
// routines' (TOWERJIT_FUSED_MAX_POOLS=off), at batch sizes whose batch-norm sums run in one
// block and split; and with 16-bit feature maps under the precision policy, the same bits as
// the 16-bit routines.
#include <cstring>

#include "gpu_check.h"
#include "jit/passes/half_matmuls.h"
#include "jit/reference/interpreter.h"
#include "tests/jit/graph_cases.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

const tj::Shape kImage{kBatch, 2, 6, 10};

// The block's gradients: its variables' and x's; the moving statistics are the update ops.
std::vector<Tensor> pooled_block_step() {
  const Tensor x = tj::input("x", kImage);
  const Tensor c = tj::conv2d(x, 4, 3, "conv", {.pad = 1, .use_bias = false});
  const Tensor y = tj::relu(tj::batch_norm(c, /*training=*/true, "bn") + tj::input("r", c.shape()));
  const Tensor pool = tj::max_pool2d(y);
  std::vector<Tensor> wrt = tj::trainable_variables();
  wrt.push_back(x);
  std::vector<Tensor> fetches = tj::grad(tj::sum(pool * tj::input("w", pool.shape())), wrt);
  fetches.push_back(pool);
  return fetches;
}

int library_pools(const tj::CudaProgram& p) {
  int n = 0;
  for (const tj::kir::LibraryCall& c : p.program().calls)
    n += c.op == tj::Op::MaxPool2D || c.op == tj::Op::MaxPool2DGrad;
  return n;
}

std::vector<tj::HostTensor> run(const tj::Graph& g, const std::vector<Tensor>& fetches, const tj::HostFeeds& feeds,
                                tj::HostVariables& vars, int expected_library_pools) {
  tj::CudaProgram p(g, fetches, /*run_update_ops=*/true);
  CHECK(library_pools(p) == expected_library_pools);
  return p.run(feeds, vars);
}

// One step with the pools fused and one with the routines (`routine_calls` of them: pools and
// gradients) from the same variables: the same fetches and updated variables, bit for bit.
void check_routines_bits(const tj::Graph& g, const std::vector<Tensor>& fetches, const tj::HostFeeds& feeds,
                         const tj::HostVariables& vars, int routine_calls) {
  tj::HostVariables on_vars = vars, off_vars = vars;
  const std::vector<tj::HostTensor> on = run(g, fetches, feeds, on_vars, 0);
  std::vector<tj::HostTensor> off;
  {
    ScopedEnv routines("TOWERJIT_FUSED_MAX_POOLS", "off");
    off = run(g, fetches, feeds, off_vars, routine_calls);
  }
  check_same_bits(on, off);
  for (const auto& [name, v] : on_vars) {
    INFO(name);
    CHECK(std::memcmp(v.f32.data(), off_vars.at(name).f32.data(), v.f32.size() * sizeof(float)) == 0);
  }
}

}  // namespace

TEST_CASE("GPU: a max pool in its producer and its gradient in batch norm's sums, as the reference and the routines", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const std::vector<Tensor> fetches = pooled_block_step();
  // 7 images: 420 points a channel, one block's sums. 301: 18060, split.
  for (const int64_t batch : {int64_t{1}, int64_t{7}, int64_t{301}}) {
    const std::string what = "batch " + std::to_string(batch);
    INFO(what);
    tj::reference::Variables vars = tj::reference::initialize_variables(g, 5);
    vars["bn/gamma"] = random_array({4}, 6, -2, 2);
    const tj::Shape image = kImage.bind(batch), conv{batch, 4, 6, 10}, pooled{batch, 4, 3, 5};
    const tj::reference::Feeds feeds{{"x", random_array(image, 8)}, {"r", random_array(conv, 9, -0.5, 0.5)},
                                     {"w", random_array(pooled, 10)}};
    tj::reference::Variables ref_vars = vars;
    require_close(run_gpu_and_reference(g, fetches, feeds, ref_vars, /*updates=*/true), what);

    tj::HostFeeds hf;
    for (const auto& [name, a] : feeds) hf[name] = to_host(a);
    tj::HostVariables hv;
    for (const auto& [name, a] : vars) hv[name] = to_host(a);
    check_routines_bits(g, fetches, hf, hv, 2);
  }
}

TEST_CASE("GPU: fused max pools route ties, a NaN and a -0 gradient as the routines do", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const tj::Shape shape{kBatch, 3, 6, 10};
  const Tensor x = tj::input("x", shape), r = tj::input("r", shape), s = tj::input("s", {1, 3, 1, 1});
  const Tensor masked = tj::max_pool2d(tj::relu(x * s + r)), plain = tj::max_pool2d(x * s - r),
               negated = tj::max_pool2d(-x);
  const Tensor w = tj::input("w", masked.shape());
  const std::vector<Tensor> grads = tj::grad(tj::sum(masked * w) + tj::sum(plain * w) + tj::sum(negated * w), {x, s});
  const std::vector<Tensor> fetches{masked, plain, negated, grads[0], grads[1]};
  const int64_t batch = 7;
  auto integers = [](tj::Shape sh, uint32_t seed) {
    tj::reference::Array v = random_array(sh, seed, -2.5, 2.5);
    for (double& e : v.data) e = std::round(e);
    return v;
  };
  tj::reference::Array r_values = integers(shape.bind(batch), 31), s_values({1, 3, 1, 1}), w_values = integers(masked.shape().bind(batch), 32);
  r_values.data[5] = std::nan("");
  s_values.data = {1, 2, 1};
  for (double& e : w_values.data) e = e == 0 ? -0.0 : e;  // 0 + (-0) is +0, as the routine's sum
  tj::HostFeeds feeds{{"x", to_host(integers(shape.bind(batch), 30))}, {"r", to_host(r_values)},
                      {"s", to_host(s_values)}, {"w", to_host(w_values)}};
  check_routines_bits(g, fetches, feeds, {}, 6);
}

TEST_CASE("GPU: fused max pools of 16-bit feature maps give the 16-bit routines' bits", "[gpu]") {
  for (const tj::DType t : {tj::DType::bf16, tj::DType::f16}) {
    INFO(tj::dtype_name(t));
    tj::ScopedPrecisionPolicy policy(tj::PrecisionPolicy{.matmul_operands = t});
    tj::Graph g;
    tj::GraphScope use(g);
    const std::vector<Tensor> fetches = pooled_block_step();
    for (const int64_t batch : {int64_t{7}, int64_t{301}}) {
      INFO("batch " << batch);
      tj::HostFeeds feeds{{"x", to_host(random_array(kImage.bind(batch), 11))},
                          {"r", to_host(random_array({batch, 4, 6, 10}, 12, -0.5, 0.5))},
                          {"w", to_host(random_array({batch, 4, 3, 5}, 13))}};
      check_routines_bits(g, fetches, feeds, initial(g), 2);
    }
  }
}
