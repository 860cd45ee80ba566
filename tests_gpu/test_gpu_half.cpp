// bf16 and f16 on the GPU (docs/cuda.md, "bf16 and f16"): casts, loads, stores and layout ops
// equal the CPU JIT's bit for bit (both round to nearest even, as dsl/half_float.h); products
// of bf16 or f16 operands on cuBLASLt, elementwise work, reductions after a cast back,
// constants, variables and gradients within the reference interpreter's derived bound; and a
// training step under the bf16 policy on a GPU tower within the bound of the same step on a
// CPU tower; convolutions under the conv policy on cuDNN's 16-bit configurations the same way.
// Odd batch sizes: 1, 7 and 127.
#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>

#include "dsl/half_float.h"
#include "gpu_check.h"
#include "jit/passes/half_convolutions.h"
#include "jit/passes/half_matmuls.h"
#include "runtime/cpu/cpu_program.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::DType;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

// Values that exercise each rounding case (ties to even, NaN, infinities, overflow, bf16 and
// f16 subnormals), then random ones, as f32 numbers.
tj::reference::Array values_of(int64_t n, uint32_t seed) {
  const double inf = std::numeric_limits<double>::infinity();
  const double specials[] = {1.0, -2.0, 0.0, -0.0, 0.1, inf, -inf, std::nan(""),
                             1 + 0x1p-8, 1 + 3 * 0x1p-8, 1 + 0x1p-8 + 0x1p-20, 1 + 0x1p-11, 1 + 3 * 0x1p-11,
                             65504, 65519, 65520, 1e6, 0x1.FEp127, 0x1p-24, 0x1p-25, 3 * 0x1p-25, 0x1p-14,
                             0x1p-20, 0x1p-126, 0x1p-133, 3 * 0x1p-134};
  tj::reference::Array a = random_array({n}, seed, -300, 300);
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(std::size(specials)); ++i) a[i] = static_cast<float>(specials[i]);
  return a;
}

// The same bits, a NaN matching any NaN (its payload is the backend's own).
bool same_value(const tj::HostTensor& a, const tj::HostTensor& b, int64_t i) {
  if (a.dtype != b.dtype) return false;
  if (a.dtype == DType::i32) return a.i32[i] == b.i32[i];
  const double x = tj::value_at(a, i), y = tj::value_at(b, i);
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  if (a.dtype == DType::f32) return std::bit_cast<uint32_t>(a.f32[i]) == std::bit_cast<uint32_t>(b.f32[i]);
  return a.b16[i] == b.b16[i];
}

}  // namespace

TEST_CASE("GPU: bf16 and f16 casts and layout ops equal the CPU JIT bit for bit", "[gpu][half]") {
  for (DType t : {DType::bf16, DType::f16}) {
    const DType other = t == DType::bf16 ? DType::f16 : DType::bf16;
    tj::Graph g;
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch});
    auto xi = tj::input("xi", {kBatch}, DType::i32);
    auto h = tj::input("h", {kBatch}, t);
    auto m = tj::input("m", {kBatch, 6}, t);
    const std::vector<Tensor> fetches = {
        tj::cast(x, t),                                     // f32 -> t: rounds
        tj::cast(h, DType::f32),                            // t -> f32: exact
        tj::cast(xi, t),                                    // i32 -> t
        tj::cast(tj::cast(x, t) , other),                   // t -> the other format
        tj::cast(tj::cast(tj::input("hi", {kBatch}, t), DType::f32) * 2.0f, DType::i32),  // truncates
        tj::transpose(m, {1, 0}),                           // layout ops move the 16 bits
        tj::slice(m, {0, 1}, {-1, 5}),
        tj::broadcast_to(tj::reshape(h, {kBatch, 1}), tj::Shape{kBatch, 3}),
        tj::constant(0.1, {3}, t),
        // rows of 8: 16-bit quads loaded and stored 8 bytes at a time (the vector path)
        tj::cast(tj::relu(tj::cast(tj::input("q", {kBatch, 8}, t), DType::f32)) * 3.0f - 1.0f, t)};
    tj::CudaProgram gpu(g, fetches, false);
    tj::CpuProgram cpu(g, fetches);
    // Alone (not grouped with the others into one launch), the quads' kernel takes the vector path.
    tj::CudaProgram quads(g, {fetches.back()}, false);
    REQUIRE(quads.module().kernels.size() == 1);
    CHECK(quads.module().kernels[0].vector_width == 4);
    for (int64_t n : {1, 7, 127}) {
      INFO(tj::dtype_name(t) << ", batch " << n);
      const tj::reference::Array xs = values_of(n, 7);
      tj::reference::Array hs(tj::Shape{n}, t), his(tj::Shape{n}, t), ms(tj::Shape{n, 6}, t), is(tj::Shape{n}, DType::i32);
      const tj::reference::Array r = random_array({n, 6}, 8, -70000, 70000);
      for (int64_t i = 0; i < n; ++i) {
        hs[i] = tj::half_value(tj::half_bits(xs[n - 1 - i], t), t);
        his[i] = tj::round_to(t, r[i * 6] / 8);  // finite, within i32 once doubled
        is[i] = static_cast<double>(static_cast<int32_t>(r[i * 6 + 1]) * 997);
      }
      for (int64_t i = 0; i < n * 6; ++i) ms[i] = tj::round_to(t, r[i]);
      tj::reference::Array qs(tj::Shape{n, 8}, t);
      const tj::reference::Array q_values = values_of(n * 8, 9);
      for (int64_t i = 0; i < n * 8; ++i) qs[i] = tj::round_to(t, q_values[i]);
      tj::HostFeeds feeds{{"x", to_host(xs)}, {"xi", to_host(is)}, {"h", to_host(hs)}, {"hi", to_host(his)},
                          {"m", to_host(ms)}, {"q", to_host(qs)}};
      tj::HostVariables vars;
      std::vector<tj::HostTensor> on_gpu = gpu.run(feeds, vars), on_cpu = cpu.run(feeds, vars);
      on_gpu.push_back(quads.run(feeds, vars)[0]);
      on_cpu.push_back(on_cpu.back());
      REQUIRE(on_gpu.size() == on_cpu.size());
      for (size_t f = 0; f < on_gpu.size(); ++f) {
        REQUIRE(on_gpu[f].dtype == on_cpu[f].dtype);
        REQUIRE(on_gpu[f].size() == on_cpu[f].size());
        for (int64_t i = 0; i < on_gpu[f].size(); ++i) {
          INFO("fetch " << f << " element " << i << ": GPU " << tj::value_at(on_gpu[f], i) << ", CPU "
                        << tj::value_at(on_cpu[f], i));
          CHECK(same_value(on_gpu[f], on_cpu[f], i));
        }
      }
      // The closed form: f32 -> t as dsl/half_float.h rounds the f32 number.
      for (int64_t i = 0; i < n; ++i)
        if (!std::isnan(xs[i])) CHECK(on_gpu[0].b16[i] == tj::half_bits(static_cast<float>(xs[i]), t));
    }
  }
}

// Products of bf16 or f16 operands (cuBLASLt: CUDA_R_16BF / CUDA_R_16F in, f32 out), an
// elementwise kernel that rounds its result, a reduction after the cast back, a constant, a
// bf16 / f16 variable, and the gradient through the product: against the reference within its
// derived bound (the summation order on the GPU is not the CPU's, so not bitwise).
TEST_CASE("GPU: bf16 and f16 products, elementwise kernels and reductions within the derived bound",
          "[gpu][half][matmul]") {
  for (DType t : {DType::bf16, DType::f16}) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch, 33});
    auto w = tj::variable("w", {33, 17}, {.init = tj::init::uniform(-1, 1)});
    auto bt = tj::input("bt", {17, 33});
    auto v = tj::variable("v", {17}, {.init = tj::init::uniform(-1, 1), .dtype = t});
    auto a = tj::cast(x, t);
    auto y = tj::matmul(a, tj::cast(w, t));
    auto yt = tj::matmul(a, tj::transpose(tj::cast(bt, t), {1, 0}));
    auto z = tj::cast(tj::relu(y) * 2.0f + tj::cast(tj::constant(0.1, {17}, t), DType::f32) + tj::cast(v, DType::f32), t);
    auto rows = tj::sum(tj::cast(z, DType::f32), {1});
    auto loss = tj::mean(y * y) + tj::mean(tj::cast(z, DType::f32));
    auto dw = tj::grad(loss, {w})[0];
    for (int64_t n : {1, 7, 127}) {
      INFO(tj::dtype_name(t) << ", batch " << n);
      tj::reference::Variables vars = tj::reference::initialize_variables(g, 5);
      const JitRun r = run_gpu_and_reference(
          g, {y, yt, z, rows, loss, dw}, {{"x", random_array({n, 33}, 3, -2, 2)}, {"bt", random_array({17, 33}, 4, -2, 2)}},
          vars);
      require_close(r, std::string("GPU ") + std::string(tj::dtype_name(t)) + " program");
    }
  }
}

// One SGD step of the model `build` makes (with its updates when asked) under `policy` on gpu:0
// and on cpu:0, from the same variables and input x, each within the bound of the reference's
// step on the graph `rewrite` (the policy's pass) writes, and so within twice it of each other.
static void check_policy_step(const std::function<Tensor(tj::Graph&, bool)>& build,
                              const std::function<tj::Rewritten(const tj::Graph&)>& rewrite,
                              const tj::PrecisionPolicy& policy, const tj::reference::Array& xs, const std::string& what) {
  tj::Graph ref_graph;
  const Tensor ref_loss = build(ref_graph, true);
  const tj::reference::Variables initial = tj::reference::initialize_variables(ref_graph, 3);
  tj::Rewritten rewritten = rewrite(ref_graph);
  tj::reference::Variables want = initial;
  JitRun ref;
  reference_side(ref, rewritten.graph, tj::remap_tensors(rewritten, {ref_loss}), {{"x", xs}}, want, true, 0);
  auto step = [&](const tj::Towers& towers) {
    tj::Graph g;
    const Tensor loss = build(g, false);
    tj::TowerTrainer trainer(g, loss, towers.precision(policy), tj::sgd(0.1));
    for (const auto& [name, a] : initial) trainer.variables().at(name) = to_host(a);
    trainer.step({{"x", to_host(xs)}});
    return trainer.variables();
  };
  const tj::HostVariables on_gpu = step(tj::Towers{tj::gpu(0)}), on_cpu = step(tj::Towers{tj::cpu(0)});
  size_t at = 1;  // the bounds: the loss's, then each variable's in `want`'s order
  for (const auto& [name, value] : want) {
    INFO(name);
    const tj::reference::Array& bound = ref.bound[at++];
    for (const tj::HostVariables* side : {&on_gpu, &on_cpu}) {
      JitRun one;
      one.jit = {to_array(side->at(name))};
      one.ref = {value};
      one.bound = {bound};
      require_close(one, what + (side == &on_gpu ? " on gpu:0" : " on cpu:0"));
    }
    for (int64_t i = 0; i < value.size(); ++i)
      CHECK(std::abs(on_gpu.at(name).f32[i] - on_cpu.at(name).f32[i]) <= 2 * bound[i]);
  }
}

// One SGD step of a two-layer MLP under Towers::precision(bf16) on gpu:0 and on cpu:0, each
// against the reference of the same step on the graph the policy pass writes (the derived
// bound), and so against each other within twice that bound.
TEST_CASE("GPU: a training step under the bf16 policy on a GPU tower is the CPU tower's within the bound", "[gpu][half]") {
  auto build = [](tj::Graph& g, bool updates) {
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch, 6});
    auto y = tj::dense(tj::relu(tj::dense(x, 5, "fc1")), 3, "fc2");
    auto loss = tj::mean(y * y);
    if (updates) {
      auto vars = tj::trainable_variables();
      auto grads = tj::grad(loss, vars);
      for (size_t i = 0; i < vars.size(); ++i) tj::assign(vars[i], vars[i] - 0.1f * grads[i]);
    }
    return loss;
  };
  check_policy_step(build, [](const tj::Graph& g) { return tj::half_matmul_operands(g, DType::bf16); },
                    {.matmul_operands = DType::bf16}, random_array({7, 6}, 9, -1, 1), "bf16 step");
}

// A conv net's SGD step under the conv policy on gpu:0 (cuDNN's PSEUDO_BFLOAT16 / PSEUDO_HALF
// configurations on the emulator's cuDNN) and on cpu:0, each against the reference of the same
// step on the graph the policy pass writes (16-bit operands and results, the derived bound),
// and so against each other within twice that bound. Batches 1 and 7; a stride-2 layer, an
// input gradient (the second convolution's) and a 16-bit max pool between them (overlapping
// padded 3x3 windows of stride 2: its gradient sums dy where windows share their maximum, and
// rounds once) included. Without cuDNN, a 16-bit convolution is an error naming the fix.
TEST_CASE("GPU: convolutions under the bf16 and f16 conv policy run on cuDNN's 16-bit configurations within the bound",
          "[gpu][half]") {
  auto build = [](tj::Graph& g, bool updates) {
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch, 2, 9, 9});
    auto w1 = tj::variable("w1", {3, 2, 3, 3}, {.init = tj::init::uniform(-0.5, 0.5)});
    auto w2 = tj::variable("w2", {4, 3, 3, 3}, {.init = tj::init::uniform(-0.5, 0.5)});
    auto h = tj::max_pool2d(tj::relu(tj::conv2d(x, w1, {.stride = 1, .pad = 1})), {.kernel = 3, .stride = 2, .pad = 1});
    auto y = tj::conv2d(h, w2, {.stride = 2, .pad = 0});
    auto loss = tj::mean(y * y);
    if (updates) {
      auto grads = tj::grad(loss, {w1, w2});
      tj::assign(w1, w1 - 0.1f * grads[0]);
      tj::assign(w2, w2 - 0.1f * grads[1]);
    }
    return loss;
  };
  for (DType t : {DType::bf16, DType::f16}) {
    for (int64_t n : {1, 7}) {
      INFO(tj::dtype_name(t) << ", batch " << n);
      check_policy_step(build, [t](const tj::Graph& g) { return tj::half_conv_operands(g, t); },
                        {.conv_operands = t}, random_array({n, 2, 9, 9}, 9, -1, 1), "16-bit conv step");
    }
  }
  ScopedEnv off("TOWERJIT_CUDNN", "off");
  tj::Graph g;
  const Tensor loss = build(g, false);
  tj::TowerTrainer trainer(g, loss, tj::Towers{tj::gpu(0)}.precision({.conv_operands = DType::bf16}), tj::sgd(0.1));
  CHECK_THROWS_WITH(trainer.step({{"x", to_host(random_array({2, 2, 9, 9}, 9, -1, 1))}}),
                    Catch::Contains("in bf16, which needs cuDNN, and cuDNN is not used here (TOWERJIT_CUDNN=off)") &&
                        Catch::Contains(".conv_operands = DType::f32"));
}
