// Every op through the CPU JIT equals the reference interpreter within the float32 error bound
// of each element (tests/jit/error_bound_check.h), at odd sizes and with the batch bound at
// run time.
#include <cmath>
#include <functional>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "cpu_test_env.h"
#include "dsl/philox.h"
#include "graph_cases.h"
#include "jit/cpu/cpu_isa.h"
#include "jit/reference/interpreter.h"
#include "jit_check.h"
#include "nan_cases.h"
#include "op_cases.h"
#include "runtime/cpu/cpu_program.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

// The CPU JIT as graph_cases.h runs it, splitting its work over `pool` when given.
cases::Runner on_cpu(tj::ThreadPool* pool = nullptr) {
  return [pool](const tj::Graph& g, const std::vector<Tensor>& fetches, const tj::reference::Feeds& feeds,
                tj::reference::Variables& vars, bool updates, uint64_t step) {
    return run_both(g, fetches, feeds, vars, updates, pool, step);
  };
}

}  // namespace

TEST_CASE("every elementwise, reduction and layout op matches the reference", "[cpu][jit][isa]") {
  for (const Case& c : op_cases())
    for (int64_t batch : {1, 7, 127}) cases::one_op(on_cpu(), c, batch, "");
}

TEST_CASE("integer labels: one_hot and cross entropy match the reference", "[cpu][jit][isa]") {
  cases::cross_entropy_and_one_hot(on_cpu(), "");
}

TEST_CASE("convolution and pools match the reference", "[cpu][jit][isa]") {
  cases::convolutions_and_pools(on_cpu(), "");
  tj::ThreadPool threads(2);  // the batched im2col and the pools split over threads too
  cases::convolutions_and_pools(on_cpu(&threads), " over 2 threads");
}

TEST_CASE("max pools after a ReLU, its mask in the pool gradient, match the reference", "[cpu][jit][isa]") {
  cases::relu_then_pools(on_cpu(), "");
  tj::ThreadPool threads(2);
  cases::relu_then_pools(on_cpu(&threads), " over 2 threads");
}

TEST_CASE("max pools of an elementwise kernel's output, NaN and ties in the windows, match the reference", "[cpu][jit][isa]") {
  cases::max_pools_in_their_producers(on_cpu(), "");
}

TEST_CASE("dropout's mask, drawn again by each kernel that reads it, is the reference's", "[cpu][jit][isa]") {
  cases::dropout_drawn_by_each_reader(on_cpu(), "");
}

// Every CPU convolution path (the direct AVX-512 and AVX2 kernels, chosen by TOWERJIT_CPU_ISA
// among the levels this CPU has, and im2col + sgemm, TOWERJIT_DIRECT_CONV=off) at geometries
// that leave partial blocks: channel counts that are not multiples of 16, widths that are not
// multiples of 6, one to four input channels or input-gradient outputs (narrow_conv.cpp's
// kernels, with pixel counts that leave a partial vector), strides 1 and 2, padding 0 to k-1,
// more than 16 input or output channels (the 32-lane AVX-512 blocks), and the input gradient
// of a strided convolution (the direct path's fallback).
TEST_CASE("convolution: direct and im2col paths match the reference at odd geometries", "[cpu][jit][isa]") {
  struct Geometry { int64_t c, h, w, o, k; int stride, pad; };
  const Geometry geometries[] = {{1, 7, 7, 7, 3, 1, 1},  {3, 5, 11, 17, 3, 1, 0}, {16, 9, 13, 33, 3, 1, 2},
                                 {2, 8, 6, 1, 5, 1, 2},  {5, 7, 9, 16, 1, 1, 0},  {4, 9, 7, 6, 3, 2, 1},
                                 {20, 6, 5, 3, 3, 1, 1},  {1, 28, 28, 16, 3, 1, 1}, {127, 5, 6, 7, 3, 1, 1},
                                 {7, 11, 9, 127, 3, 2, 0}, {33, 7, 5, 40, 3, 1, 1}, {16, 1, 1, 16, 1, 1, 0},
                                 {8, 13, 3, 24, 3, 2, 2}, {1, 11, 9, 3, 3, 2, 1}, {3, 13, 17, 5, 3, 1, 1},
                                 {6, 10, 11, 20, 3, 3, 1}, {32, 9, 8, 20, 3, 2, 1}, {8, 4, 40, 20, 3, 1, 1}};
  // {6, 10, 11, 20, 3, 3, 1}: the forward kernels of any stride; {32, ...}: the filter gradient
  // by input channels (AVX-512, 16 of them a vector) at stride 2 with blocks of 6 and 7 outputs;
  // {8, 4, 40, ...}: rows of 40 pixels, in blocks of 10 (forward, two vectors of channels at
  // AVX-512) and of 20 (input gradient, one vector of 8 channels).
  struct Path { const char* isa; const char* direct; };
  std::vector<Path> paths{{nullptr, "off"}};
  for (tj::knobs::CpuIsa level : {tj::knobs::CpuIsa::avx512, tj::knobs::CpuIsa::avx2})
    if (level <= tj::cpujit::cpu_isa()) paths.push_back({tj::cpujit::isa_name(level), "on"});
  tj::ThreadPool threads(2);
  for (const Geometry& ge : geometries)
    for (const Path& path : paths) {
      tj::test::ScopedEnv isa("TOWERJIT_CPU_ISA", path.isa ? std::optional<std::string>(path.isa) : std::nullopt);
      tj::test::ScopedEnv direct("TOWERJIT_DIRECT_CONV", path.direct);
      tj::Graph g;
      tj::GraphScope use(g);
      auto x = tj::input("x", {kBatch, ge.c, ge.h, ge.w});
      auto w = tj::input("w", {ge.o, ge.c, ge.k, ge.k});
      auto y = tj::conv2d(x, w, {.stride = ge.stride, .pad = ge.pad});
      // A linear loss, so dy is the random `r` (values in [-1, 1]).
      const int64_t oh = y.shape()[2], ow = y.shape()[3];
      auto r_in = tj::input("r", {kBatch, ge.o, oh, ow});
      auto grads = tj::grad(tj::sum(y * r_in), {x, w});
      for (int64_t batch : {1, 3}) {
        tj::reference::Variables vars;
        auto r = run_both(g, {y, grads[0], grads[1]},
                          {{"x", random_array({batch, ge.c, ge.h, ge.w}, 7)},
                           {"w", random_array({ge.o, ge.c, ge.k, ge.k}, 8)},
                           {"r", random_array({batch, ge.o, oh, ow}, 9)}},
                          vars, false, &threads);
        require_close(r, std::string("conv (") + (path.isa ? path.isa : "im2col") + ") c=" + std::to_string(ge.c) +
                                   " h=" + std::to_string(ge.h) + " w=" + std::to_string(ge.w) +
                                   " o=" + std::to_string(ge.o) + " k=" + std::to_string(ge.k) +
                                   " stride=" + std::to_string(ge.stride) + " pad=" + std::to_string(ge.pad) +
                                   " batch=" + std::to_string(batch));
      }
    }
}

// The filter gradient sums a fixed number of chunks of the batch, and the forward and
// input-gradient kernels split images: the same bits whatever the number of threads, at every
// instruction set level the direct kernels have. Not the im2col path: it splits each product
// over the pool, and OpenBLAS may take another code path for a part's smaller shape (seen with
// its Haswell kernels at 127 output channels), which the reference tests bound instead.
TEST_CASE("convolution: the same bits whatever the thread count", "[cpu][jit][isa]") {
  struct Geometry { int64_t c, h, w, o, k; int stride, pad; };
  const Geometry geometries[] = {{16, 9, 11, 16, 3, 1, 1}, {1, 7, 7, 16, 3, 1, 1}, {33, 6, 5, 40, 3, 2, 1},
                                 {7, 5, 9, 127, 3, 1, 2}, {3, 10, 12, 5, 3, 1, 1}};
  std::vector<const char*> levels;
  for (tj::knobs::CpuIsa level : {tj::knobs::CpuIsa::avx512, tj::knobs::CpuIsa::avx2})
    if (level <= tj::cpujit::cpu_isa()) levels.push_back(tj::cpujit::isa_name(level));
  tj::ThreadPool two(2), three(3);
  for (const Geometry& ge : geometries)
    for (const char* level : levels) {
      tj::test::ScopedEnv isa("TOWERJIT_CPU_ISA", level);
      tj::test::ScopedEnv direct("TOWERJIT_DIRECT_CONV", "on");
      tj::Graph g;
      tj::GraphScope use(g);
      auto x = tj::input("x", {kBatch, ge.c, ge.h, ge.w});
      auto w = tj::input("w", {ge.o, ge.c, ge.k, ge.k});
      auto y = tj::conv2d(x, w, {.stride = ge.stride, .pad = ge.pad});
      auto r_in = tj::input("r", {kBatch, ge.o, y.shape()[2], y.shape()[3]});
      auto grads = tj::grad(tj::sum(y * r_in), {x, w});
      const int64_t batch = 7;
      tj::HostFeeds feeds{{"x", to_host(random_array({batch, ge.c, ge.h, ge.w}, 17))},
                          {"w", to_host(random_array({ge.o, ge.c, ge.k, ge.k}, 18))},
                          {"r", to_host(random_array({batch, ge.o, y.shape()[2], y.shape()[3]}, 19))}};
      std::vector<std::vector<tj::HostTensor>> results;
      for (tj::ThreadPool* pool : {static_cast<tj::ThreadPool*>(nullptr), &two, &three}) {
        tj::CpuProgram program(g, {y, grads[0], grads[1]}, false, pool);
        tj::HostVariables vars;
        results.push_back(program.run(feeds, vars, 0));
      }
      for (size_t p = 1; p < results.size(); ++p)
        for (size_t o = 0; o < results[0].size(); ++o) {
          INFO("level " << level << " c=" << ge.c << " o=" << ge.o << " output " << o
                        << " pool " << p);
          CHECK(results[p][o].f32 == results[0][o].f32);
        }
    }
}

// The 2x2 / stride 2 max pool runs 8 windows at a time (AVX2) or 16 (AVX-512), a row's last
// windows masked, and one by one at the baseline level: widths 38 (19 windows: 8 + 8 + 3, or
// 16 + 3), 37 (a column outside every window) and 14 (7 windows: none a whole vector), and
// values drawn from {0, 1, 2} so that windows tie and the first maximum in row-major order must
// win.
TEST_CASE("2x2 max pool: the vector and scalar paths, ties and odd sizes match the reference", "[cpu][jit][isa]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto even = tj::input("even", {kBatch, 3, 6, 38});
  auto odd = tj::input("odd", {kBatch, 2, 7, 37});
  auto narrow = tj::input("narrow", {kBatch, 2, 14, 14});
  auto pe = tj::max_pool2d(even), po = tj::max_pool2d(odd), pn = tj::max_pool2d(narrow);
  auto loss = tj::sum(pe * pe) + tj::sum(po * po * po) + tj::sum(pn * pn);
  auto grads = tj::grad(loss, {even, odd, narrow});
  auto ties = [](tj::Shape shape, uint32_t seed) {
    tj::reference::Array a = random_array(shape, seed, 0, 3);
    for (double& v : a.data) v = std::floor(v);
    return a;
  };
  tj::ThreadPool threads(2);
  for (int64_t batch : {1, 3}) {
    tj::reference::Variables vars;
    auto r = run_both(g, {pe, po, pn, grads[0], grads[1], grads[2]},
                      {{"even", ties({batch, 3, 6, 38}, 11)},
                       {"odd", random_array({batch, 2, 7, 37}, 12)},
                       {"narrow", ties({batch, 2, 14, 14}, 13)}},
                      vars, false, &threads);
    require_close(r, "2x2 max pool at batch " + std::to_string(batch));
  }
}

// Matrix products with a pool go two ways (runtime/cpu/gemm.h): under 4 MFLOP one call, above
// it slices over the threads (by rows when the output is taller, by columns when it is wider).
// Every way, a large product too, and every transpose against the reference.
TEST_CASE("matrix products split over the pool match the reference in every transpose", "[cpu][jit][isa]") {
  struct Size { int64_t m, n, k; };
  const Size sizes[] = {{33, 17, 9},       // one call
                        {301, 97, 203},    // slices by rows (12 MFLOP)
                        {37, 509, 211},    // slices by columns (8 MFLOP)
                        {401, 303, 299}};  // slices by rows (73 MFLOP; once OpenBLAS's threads)
  tj::ThreadPool threads(2);
  for (const Size& z : sizes)
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      tj::Graph g;
      tj::GraphScope use(g);
      auto a = tj::input("a", ta ? tj::Shape{z.k, z.m} : tj::Shape{z.m, z.k});
      auto b = tj::input("b", tb ? tj::Shape{z.n, z.k} : tj::Shape{z.k, z.n});
      auto c = tj::matmul(ta ? tj::transpose(a) : a, tb ? tj::transpose(b) : b);
      tj::reference::Variables vars;
      auto r = run_both(g, {c},
                        {{"a", random_array(a.shape(), 21)}, {"b", random_array(b.shape(), 22)}}, vars,
                        false, &threads);
      require_close(r, "matmul " + std::to_string(z.m) + "x" + std::to_string(z.n) + "x" +
                                 std::to_string(z.k) + (ta ? " A^T" : "") + (tb ? " B^T" : ""));
    }
}

#if defined(__x86_64__)
// Denormal floats are flushed to zero while a program runs (runtime/flush_denormals.h), and the
// caller's floating-point mode is what it was afterwards.
TEST_CASE("a run flushes denormals to zero and restores the caller's mode", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 3});
  auto y = x * 3.0f;
  tj::CpuProgram program(g, {y});
  tj::HostTensor in(tj::Shape{1, 3});
  in.f32 = {1e-40f, 2.0f, -3e-39f};  // two denormals and a normal number
  tj::HostVariables none;
  const unsigned before = _mm_getcsr();
  const auto out = program.run({{"x", in}}, none);
  CHECK(_mm_getcsr() == before);
  CHECK(out[0].f32[0] == 0.0f);
  CHECK(out[0].f32[1] == 6.0f);
  CHECK(out[0].f32[2] == 0.0f);
}
#endif

TEST_CASE("random_uniform draws the reference's numbers, fresh each step", "[cpu][jit]") {
  cases::random_uniform_steps(on_cpu(), "");
}

// The kernels write Philox's rounds out themselves (jit/cpu/llvm_emitter.cpp), vectorised: every
// number must be dsl/philox.cpp's, bit for bit, in the vector body and the remainder alike, on
// every word of a block, for a seed and a step with their high words set, at every ISA level.
TEST_CASE("random_uniform in the CPU kernels is philox_uniform bit for bit", "[cpu][jit][isa]") {
  const uint64_t seed = 0x9E3779B97F4A7C15ull;
  for (int64_t width : {1, 7, 1031}) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch, width});
    auto u = tj::random_uniform_like(x, seed);
    tj::ThreadPool threads(2);
    tj::CpuProgram program(g, {u}, false, &threads);
    for (int64_t batch : {1, 7, 127}) {
      tj::HostTensor in(tj::Shape{batch, width});
      tj::HostVariables none;
      for (uint64_t step : {0ull, 3ull, (1ull << 32) + 5}) {
        const auto out = program.run({{"x", in}}, none, step);
        int wrong = 0;
        for (int64_t i = 0; i < batch * width; ++i)
          wrong += out[0].f32[i] != static_cast<float>(tj::philox_uniform(seed, step, static_cast<uint64_t>(i)));
        INFO("width " << width << ", batch " << batch << ", step " << step);
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("relu keeps a NaN, and its gradient there is 0", "[cpu][jit]") {
  cases::relu_keeps_nan(on_cpu(), "");
}

// At every TOWERJIT_CPU_ISA level ([isa]): the 2x2 pool has an AVX2 path, and the JIT's
// vectoriser sees the selects differently per level; and split over threads, whose partial
// reductions and pool planes meet again.
TEST_CASE("max, max reductions and max pools keep a NaN, and their gradients go to it", "[cpu][jit][isa]") {
  nan_cases::max_keeps_nan(on_cpu(), "");
  tj::ThreadPool threads(2);
  nan_cases::max_keeps_nan(on_cpu(&threads), " over 2 threads");
}

TEST_CASE("Adam's bias corrections 1 - beta^t are within 10 roundings of the exact value", "[cpu][jit]") {
  cases::bias_corrections(on_cpu(), "");
}

TEST_CASE("pow's gradient where the base or the exponent is 0 is PyTorch's", "[cpu][jit]") {
  cases::pow_gradient_at_zero(on_cpu(), "");
}

TEST_CASE("update ops write the variables after every read of the old values", "[cpu][jit]") {
  cases::batch_norm_updates(on_cpu(), "");
}

TEST_CASE("an SGD momentum step updates weights and momenta in place, as the reference does", "[cpu][jit][isa]") {
  const JitRun r = cases::momentum_step(on_cpu(), "");
  // Every update wrote its variable directly; the one copy is the fetched weight's snapshot.
  CHECK(r.program->program().copies.size() == 1);
}

// Found by the graph fuzz target (fuzz/regressions/graph_builder/batch-from-an-unread-input):
// a fetch shaped with B that reads no batched input ran with B = 1 while the reference took B
// from the fed inputs.
TEST_CASE("B comes from a fed input the program does not read, as in the reference", "[cpu][jit]") {
  tj::test::ScopedEnv no_cache("TOWERJIT_CACHE", "off");
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", {kBatch, 2}), s = tj::input("s", {});
  const Tensor wide = tj::broadcast_to(s * 2, {3, kBatch});
  const Tensor zeros = tj::grad(tj::sum(s * s), {x})[0];  // x does not reach the loss
  const tj::reference::Feeds feeds = {{"x", random_array({5, 2}, 1)}, {"s", random_array({}, 2)}};
  tj::reference::Variables vars;
  const JitRun r = run_both(g, {wide, zeros}, feeds, vars);
  CHECK(r.jit[0].shape == tj::Shape{3, 5});
  CHECK(r.jit[1].shape == tj::Shape{5, 2});
  require_close(r, "B from an unread input");
  tj::CpuProgram alone(g, {wide});
  tj::HostVariables none;
  CHECK_THROWS_WITH(alone.run({{"s", tj::scalar(1)}}, none),
                    Catch::Contains("batch size unknown") && Catch::Contains("no fed input holds the batch dimension B"));
}
