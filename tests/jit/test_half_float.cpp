// bf16 and f16: the rounding against closed forms (known bit patterns, ties to even, NaN,
// infinities, subnormals, overflow), the CPU JIT's casts, loads and stores bit for bit against
// it at every CPU level, matrix products of bf16 and f16 operands against the reference within
// the derived bound, checkpoints, and the errors for what does not take them.
#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <regex>

#include "cpu_test_env.h"
#include "dsl/half_float.h"
#include "jit/cpu/cpu_isa.h"
#include "jit/cuda/cuda_emitter.h"
#include "jit/cuda/nvrtc_compiler.h"
#include "jit/passes/half_convolutions.h"
#include "jit/passes/half_matmuls.h"
#include "jit/passes/pipeline.h"
#include "jit/reference/interpreter.h"
#include "jit_check.h"
#include "runtime/checkpoint/checkpoint_format.h"
#include "runtime/cpu/cpu_program.h"
#include "runtime/cpu/gemm_half.h"
#include "runtime/cpu/half_conv.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::DType;
using tj::kBatch;
using namespace tj::testing;

namespace {

double bits_f32(uint32_t bits) { return std::bit_cast<float>(bits); }

// Every CPU level this CPU has, each a TOWERJIT_CPU_ISA value.
std::vector<const char*> levels() {
  std::vector<const char*> out;
  for (auto level : {tj::knobs::CpuIsa::amx, tj::knobs::CpuIsa::avx512bf16, tj::knobs::CpuIsa::avx512,
                     tj::knobs::CpuIsa::avx2, tj::knobs::CpuIsa::baseline})
    if (level <= tj::cpujit::widest_isa()) out.push_back(tj::cpujit::isa_name(level));
  return out;
}

// Values that exercise each rounding case, cycled to fill `n` elements, then random ones.
std::vector<double> special_values() {
  const double inf = std::numeric_limits<double>::infinity();
  return {1.0, -2.0, 0.0, -0.0, 0.1, inf, -inf, std::nan(""),
          1 + 0x1p-8, 1 + 3 * 0x1p-8, 1 + 0x1p-8 + 0x1p-20,  // bf16 ties to even, above a tie
          1 + 0x1p-11, 1 + 3 * 0x1p-11,                     // f16 ties
          65504, 65519, 65520, 1e6,                          // f16's largest, its overflow
          bits_f32(0x7F7FFFFF), bits_f32(0x7F7F7FFF),        // f32's largest, bf16's largest below
          0x1p-24, 0x1p-25, 3 * 0x1p-25, 0x1p-14, 0x1p-20,   // f16 subnormals and ties among them
          0x1p-126, 0x1p-133, 3 * 0x1p-134};                 // bf16 subnormals (f32's too)
}

tj::reference::Array values_of(int64_t n, uint32_t seed) {
  tj::reference::Array a = random_array({n}, seed, -300, 300);
  const std::vector<double> specials = special_values();
  // As f32 numbers (0.1 becomes float(0.1)): the backend is fed exactly what the reference is.
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(specials.size()); ++i) a[i] = static_cast<float>(specials[i]);
  return a;
}

}  // namespace

TEST_CASE("half floats: rounding to bf16 matches known bit patterns", "[half]") {
  using tj::half_bits;
  const auto bf = [](double x) { return half_bits(x, DType::bf16); };
  CHECK(bf(1.0) == 0x3F80);
  CHECK(bf(-2.0) == 0xC000);
  CHECK(bf(-0.0) == 0x8000);
  CHECK(bf(1 + 0x1p-8) == 0x3F80);          // a tie, to the even neighbour below
  CHECK(bf(1 + 3 * 0x1p-8) == 0x3F82);      // a tie, to the even neighbour above
  CHECK(bf(1 + 0x1p-8 + 0x1p-20) == 0x3F81);  // just above a tie
  CHECK(bf(0.1) == 0x3DCD);
  CHECK(bf(INFINITY) == 0x7F80);
  CHECK(bf(-INFINITY) == 0xFF80);
  CHECK(bf(std::nan("")) == 0x7FC0);
  CHECK(bf(bits_f32(0x7F7FFFFF)) == 0x7F80);  // f32's largest rounds past bf16's: infinity
  CHECK(bf(bits_f32(0x7F7F7FFF)) == 0x7F7F);
  CHECK(bf(0x1p-133) == 0x0001);  // the smallest subnormal
  CHECK(bf(0x1p-134) == 0x0000);  // half of it: a tie, to zero (even)
  CHECK(bf(3 * 0x1p-134) == 0x0002);
  CHECK(bf(0x1p-126) == 0x0080);
  CHECK(bf(bits_f32(0x00000001)) == 0x0000);  // f32's smallest subnormal
}

TEST_CASE("half floats: rounding to f16 matches known bit patterns", "[half]") {
  const auto h = [](double x) { return tj::half_bits(x, DType::f16); };
  CHECK(h(1.0) == 0x3C00);
  CHECK(h(-2.0) == 0xC000);
  CHECK(h(0.1) == 0x2E66);
  CHECK(h(1 + 0x1p-11) == 0x3C00);
  CHECK(h(1 + 3 * 0x1p-11) == 0x3C02);
  CHECK(h(65504) == 0x7BFF);
  CHECK(h(65519) == 0x7BFF);
  CHECK(h(65520) == 0x7C00);  // the tie above the largest value goes to infinity (even)
  CHECK(h(-1e6) == 0xFC00);
  CHECK(h(0x1p-24) == 0x0001);
  CHECK(h(0x1p-25) == 0x0000);
  CHECK(h(3 * 0x1p-25) == 0x0002);
  CHECK(h(0x1p-14) == 0x0400);
  CHECK(h(std::nan("")) == 0x7E00);
}

TEST_CASE("half floats: every bit pattern survives value and back", "[half]") {
  for (DType t : {DType::bf16, DType::f16})
    for (uint32_t b = 0; b < 0x10000; ++b) {
      const double v = tj::half_value(static_cast<uint16_t>(b), t);
      if (std::isnan(v)) continue;
      INFO(tj::dtype_name(t) << " bits " << b);
      REQUIRE(tj::half_bits(v, t) == b);
      REQUIRE(tj::round_to(t, v) == v);
    }
  CHECK(tj::unit_roundoff(DType::bf16) == 0x1p-8);
  CHECK(tj::unit_roundoff(DType::f16) == 0x1p-11);
}

// Casts in the CPU JIT: f32 -> half -> store (rounding, bit for bit), half load -> f32 (exact),
// at 1, 7 and 127 elements and every CPU level this CPU has.
TEST_CASE("half floats: the CPU JIT's casts round as the closed form, bit for bit", "[half][cpu][jit][isa]") {
  for (const char* level : levels())
    for (DType t : {DType::bf16, DType::f16})
      for (int64_t n : {1, 7, 127}) {
        tj::test::ScopedEnv isa("TOWERJIT_CPU_ISA", level);
        INFO("level " << level << ", " << tj::dtype_name(t) << ", " << n << " elements");
        tj::Graph g;
        tj::GraphScope use(g);
        auto x = tj::input("x", {kBatch});
        auto h = tj::cast(x, t);
        auto back = tj::cast(tj::input("h", {kBatch}, t), DType::f32);
        const tj::reference::Array xs = values_of(n, 7);
        tj::reference::Array hs(tj::Shape{n}, t);
        for (int64_t i = 0; i < n; ++i) hs[i] = tj::half_value(tj::half_bits(xs[n - 1 - i], t), t);
        tj::HostFeeds feeds{{"x", to_host(xs)}, {"h", to_host(hs)}};
        tj::HostVariables vars;
        tj::CpuProgram program(g, {h, back});
        const std::vector<tj::HostTensor> out = program.run(feeds, vars);
        REQUIRE(out[0].dtype == t);
        for (int64_t i = 0; i < n; ++i) {
          INFO("element " << i << " = " << xs[i]);
          CHECK(out[0].b16[i] == tj::half_bits(static_cast<float>(xs[i]), t));
          const double widened = out[1].f32[i], want = hs[i];
          CHECK(((std::isnan(widened) && std::isnan(want)) || std::bit_cast<uint64_t>(widened) == std::bit_cast<uint64_t>(want)));
        }
        // The reference rounds the same way: exact inputs give the same bits, bound 0.
        tj::reference::Variables rv;
        tj::reference::ErrorBounds bounds;
        const auto ref = tj::reference::run(g, {h}, {{"x", xs}, {"h", hs}}, rv, {.bounds = &bounds});
        for (int64_t i = 0; i < n; ++i) {
          if (!std::isfinite(xs[i])) continue;  // an infinite input's own bound is NaN
          CHECK(ref[0][i] == tj::half_value(out[0].b16[i], t));
          CHECK(bounds.fetches[0][i] == 0);
        }
      }
}

// A cast of a computed value: the backend's f32 input differs from the reference's exact one,
// so the two may round to neighbours; the derived bound (u = 2^-8 or 2^-11) covers it.
TEST_CASE("half floats: casts of computed values within the derived bound", "[half][cpu][jit]") {
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t n : {1, 7, 127}) {
      INFO(tj::dtype_name(t) << ", " << n << " elements");
      tj::Graph g;
      tj::GraphScope use(g);
      auto x = tj::input("x", {kBatch, 3});
      auto y = tj::cast(tj::cast(tj::exp(x) * 3.0f - x, t), DType::f32) * 2.0f;
      require_jit_matches(g, {y}, {{"x", random_array({n, 3}, 11, -4, 4)}}, {}, "cast of exp");
    }
}

TEST_CASE("half floats: constants and variables start rounded once", "[half][cpu][jit]") {
  for (DType t : {DType::bf16, DType::f16}) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto c = tj::constant(0.1, {7}, t);
    auto v = tj::variable("w", {3}, {.init = tj::init::constant(0.3), .dtype = t});
    auto y = tj::cast(c, DType::f32) + tj::sum(tj::cast(v, DType::f32));
    tj::reference::Variables rv = tj::reference::initialize_variables(g, 1);
    CHECK(rv.at("w")[0] == tj::half_value(tj::half_bits(0.3, t), t));
    tj::HostVariables hv{{"w", to_host(rv.at("w"))}};
    tj::CpuProgram program(g, {c, y});
    const auto out = program.run({}, hv);
    for (int64_t i = 0; i < 7; ++i) CHECK(out[0].b16[i] == tj::half_bits(0.1, t));
    require_jit_matches(g, {c, y}, {}, rv, std::string("constant and variable of ") + std::string(tj::dtype_name(t)));
  }
}

// bf16 x bf16 and f16 x f16 -> f32: each product exact in f32, the sum in f32, so the f32 bound
// of the rounded operands applies; at every level (AMX tiles where amx is allowed, vdpbf16ps
// where avx512bf16 is, widened to f32 + sgemm elsewhere), transposed operands and batches too.
TEST_CASE("half floats: matmul of bf16 and f16 operands within the derived bound", "[half][cpu][jit][isa]") {
  struct Dims { int64_t m, k, n; };
  for (const char* level : levels())
    for (DType t : {DType::bf16, DType::f16})
      for (Dims d : {Dims{1, 1, 1}, Dims{7, 7, 7}, Dims{127, 33, 17}, Dims{5, 127, 127}, Dims{3, 8, 40},
                     Dims{9, 600, 300},      // several pair and column blocks of the vdpbf16ps kernel
                     Dims{70, 99, 45},       // AMX: 3 blocks of 32 rows, 4 tiles of pairs (the last odd), 2 of columns
                     Dims{200, 301, 300}}) {  // 36 MFLOP: split over the pool
        tj::test::ScopedEnv isa("TOWERJIT_CPU_ISA", level);
        INFO("level " << level << " (" << tj::cpujit::half_gemm_path(t) << "), " << tj::dtype_name(t) << ", "
                      << d.m << "x" << d.k << "x" << d.n);
        tj::Graph g;
        tj::GraphScope use(g);
        auto a = tj::cast(tj::input("a", {kBatch, d.k}), t);
        auto b = tj::cast(tj::input("b", {d.k, d.n}), t);
        auto bt = tj::cast(tj::input("bt", {d.n, d.k}), t);
        auto y = tj::matmul(a, b);
        auto yt = tj::matmul(a, tj::transpose(bt, {1, 0}));
        auto batched = tj::matmul(tj::reshape(a, {1, kBatch, d.k}), tj::reshape(b, {1, d.k, d.n}));
        CHECK(y.dtype() == DType::f32);
        require_jit_matches(g, {y, yt, batched},
                            {{"a", random_array({d.m, d.k}, 3, -2, 2)}, {"b", random_array({d.k, d.n}, 4, -2, 2)},
                             {"bt", random_array({d.n, d.k}, 5, -2, 2)}},
                            {}, "half matmul");
      }
  if (tj::cpujit::widest_isa() >= tj::knobs::CpuIsa::amx) {
    tj::test::ScopedEnv isa("TOWERJIT_CPU_ISA", "amx");
    CHECK(std::string(tj::cpujit::half_gemm_path(DType::bf16)) == "amx tiles");
    CHECK(std::string(tj::cpujit::half_gemm_path(DType::f16)) == "widened to f32 + sgemm");
  }
  if (tj::cpujit::widest_isa() >= tj::knobs::CpuIsa::avx512bf16) {
    tj::test::ScopedEnv isa("TOWERJIT_CPU_ISA", "avx512bf16");
    CHECK(std::string(tj::cpujit::half_gemm_path(DType::bf16)) == "vdpbf16ps");
    CHECK(std::string(tj::cpujit::half_gemm_path(DType::f16)) == "widened to f32 + sgemm");
  }
  // Below avx512bf16 bf16 is widened; the level below is avx512 or, on a CPU without it, avx2.
  const bool avx512 = tj::cpujit::widest_isa() >= tj::knobs::CpuIsa::avx512;
  tj::test::ScopedEnv isa("TOWERJIT_CPU_ISA", avx512 ? "avx512" : "avx2");
  CHECK(std::string(tj::cpujit::half_gemm_path(DType::bf16)) == "widened to f32 + sgemm");
}

// Gradients flow through casts to bf16 / f16 and through their matmuls, in f32: the backward
// products round dy to the operands' dtype and accumulate in f32, as the forward does.
TEST_CASE("half floats: gradients through bf16 and f16 matmuls within the derived bound", "[half][cpu][jit][isa]") {
  for (const char* level : levels())
    for (DType t : {DType::bf16, DType::f16})
      for (int64_t n : {1, 7, 127}) {
        tj::test::ScopedEnv isa("TOWERJIT_CPU_ISA", level);
        INFO("level " << level << ", " << tj::dtype_name(t) << ", batch " << n);
        tj::Graph g;
        tj::GraphScope use(g);
        auto x = tj::input("x", {kBatch, 9});
        auto w = tj::variable("w", {9, 5}, {.init = tj::init::uniform(-1, 1)});
        auto y = tj::matmul(tj::cast(x, t), tj::cast(w, t));
        auto loss = tj::mean(y * y);
        auto grads = tj::grad(loss, {w, x});
        CHECK(grads[0].dtype() == DType::f32);
        require_jit_matches(g, {loss, grads[0], grads[1]}, {{"x", random_array({n, 9}, 21, -1, 1)}},
                            tj::reference::initialize_variables(g, 5), "gradient of a half matmul");
      }
}

TEST_CASE("half floats: checkpoints hold bf16 and f16 variables as they are", "[half][checkpoint]") {
  tj::Checkpoint c;
  c.step = 3;
  for (DType t : {DType::bf16, DType::f16}) {
    tj::HostTensor v(tj::Shape{7}, t);
    for (int64_t i = 0; i < 7; ++i) v.b16[i] = static_cast<uint16_t>(0x3F00 + 37 * i);
    c.variables[std::string(tj::dtype_name(t))] = v;
  }
  const std::string bytes = tj::encode_checkpoint(c, std::source_location::current());
  const tj::Checkpoint back = tj::decode_checkpoint(bytes, "mem.tjck", std::source_location::current());
  for (DType t : {DType::bf16, DType::f16}) {
    const tj::HostTensor& v = back.variables.at(std::string(tj::dtype_name(t)));
    CHECK(v.dtype == t);
    CHECK(v.b16 == c.variables.at(std::string(tj::dtype_name(t))).b16);
  }
}

TEST_CASE("half floats: ops that compute refuse bf16 and f16 operands", "[half][errors]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto h = tj::cast(tj::input("x", {kBatch, 4}), DType::bf16);
  CHECK_THROWS_WITH(tj::exp(h), Catch::Contains("exp: expects f32 but got bf16") &&
                                    Catch::Contains("cast(x, DType::f32)"));
  CHECK_THROWS_WITH(h + h, Catch::Contains("add: operand 0 is bf16[B,4]") &&
                               Catch::Contains("computes in f32 only") && Catch::Contains("test_half_float.cpp"));
  CHECK_THROWS_WITH(tj::sum(h), Catch::Contains("bf16"));
  auto w = tj::input("w", {4, 3});
  CHECK_THROWS_WITH(tj::matmul(h, w), Catch::Contains("matmul: operands bf16[B,4] (cast) x f32[4,3] (input)") &&
                                          Catch::Contains("must both be f32, both bf16 or both f16"));
  auto f = tj::cast(w, DType::f16);
  CHECK_THROWS_WITH(tj::matmul(h, f), Catch::Contains("both bf16 or both f16"));
  CHECK(tj::matmul(h, tj::cast(w, DType::bf16)).dtype() == DType::f32);
  CHECK_THROWS_WITH(tj::iota({4}, 0, DType::bf16),
                    Catch::Contains("iota: cannot produce bf16; compute in f32 and cast the result"));
}

// The CUDA emitter stores bf16 and f16 as CUDA's own types, widens on load and rounds on
// store with the _rn intrinsics; the module includes the toolkit's headers, and NVRTC (where
// it is installed) compiles it. What it computes is tests_gpu/test_gpu_half.cpp's.
TEST_CASE("half floats: the CUDA emitter loads and stores __nv_bfloat16 and __half", "[half][cuda]") {
  for (DType t : {DType::bf16, DType::f16}) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch, 4});
    auto h = tj::cast(tj::exp(x), t);
    auto y = tj::matmul(h, tj::cast(tj::input("w", {4, 3}), t));
    const tj::LoweredProgram lowered = tj::lower_graph(g, {h.id(), y.id()}, {});
    const tj::cuda::CudaModule m = tj::cuda::emit_cuda_module(lowered.graph, lowered.program, "half");
    const std::string type = t == DType::bf16 ? "__nv_bfloat16" : "__half";
    INFO(m.source);
    CHECK(m.source.find("#include <cuda_bf16.h>") != std::string::npos);
    CHECK(m.source.find(type + "* __restrict__ b") != std::string::npos);
    CHECK(m.source.find(t == DType::bf16 ? "__float2bfloat16_rn(" : "__float2half_rn(") != std::string::npos);
    if (tj::cuda::nvrtc_available()) CHECK_NOTHROW(tj::cuda::compile_cuda(m.source, "half", "sm_90"));
  }
}

TEST_CASE("half floats: a bf16 CUDA module without the toolkit's headers is an error naming where it looked",
          "[half][errors][cuda]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 4});
  auto y = tj::cast(tj::cast(x, DType::bf16), DType::f32);
  const tj::LoweredProgram lowered = tj::lower_graph(g, {y.id()}, {});
  const tj::cuda::CudaModule m = tj::cuda::emit_cuda_module(lowered.graph, lowered.program, "half");
  tj::test::ScopedEnv home("CUDA_HOME", "/tmp/towerjit-no-toolkit");
  CHECK_THROWS_WITH(tj::cuda::compile_cuda(m.source, "half", "sm_90"),
                    Catch::Contains("CUDA module \"half\" holds bf16 or f16 tensors and needs the CUDA toolkit's "
                                    "headers cuda_bf16.h and cuda_fp16.h, which are not in "
                                    "/tmp/towerjit-no-toolkit/include"));
}

// A cast to bf16 is no kernel of its own: it fuses into the kernel that computes its operand,
// which stores the bf16 result for the matmul (golden kernel IR, as tests/jit/test_fusion.cpp).
TEST_CASE("half floats: a cast to bf16 fuses into its producer and feeds the matmul", "[half][jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 8});
  auto w = tj::input("w", {8, 4}, DType::bf16);
  auto y = tj::matmul(tj::cast(tj::relu(x * 2.0f + 1.0f), DType::bf16), w);
  const tj::kir::Program p = tj::lower_graph(g, {y.id()}, {}).program;
  const std::string text = std::regex_replace(
      tj::kir::to_string(p), std::regex("^(kernel|part) (k[0-9]+)[^ ]* over", std::regex::multiline), "$1 $2 over");
  CHECK(text == std::string(R"(
b0 = input "x" f32[B,8]
b1 = input "w" bf16[8,4]
b2 = temp "t2" bf16[B,8]
b3 = temp "t3" f32[B,4]
kernel k0 over [B,8]
  e0 = load b0[i0*8 + i1] : f32
  e1 = const 2 : f32
  e2 = mul e0, e1 : f32
  e3 = const 1 : f32
  e4 = add e2, e3 : f32
  e5 = relu e4 : f32
  e6 = cast e5 : bf16
  store b2[i0*8 + i1] = e6
call matmul b2, b1 -> b3
fetch b3
)").substr(1));
}

// The policy's pass on a training graph: every product (forward and backward) takes bf16
// operands, the weights stay f32 masters, and the activation's cast fuses into the kernel of
// its bias add and ReLU. The gradients match the reference run on the same rewritten graph.
TEST_CASE("half floats: the matmul policy pass casts every product's operands and fuses the activation's cast",
          "[half][jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 6});
  auto h = tj::relu(tj::dense(x, 5, "fc1"));
  auto y = tj::dense(h, 3, "fc2");
  auto grads = tj::grad(tj::mean(y * y), tj::trainable_variables());
  std::vector<tj::Tensor> fetches{y};
  fetches.insert(fetches.end(), grads.begin(), grads.end());
  tj::Rewritten r = tj::half_matmul_operands(g, DType::bf16);
  const std::vector<tj::Tensor> mixed = tj::remap_tensors(r, fetches);
  int products = 0, casts = 0;
  for (int id = 0; id < r.graph.size(); ++id) {
    const tj::Node& n = r.graph.node(id);
    if (n.op == tj::Op::MatMul) {
      ++products;
      CHECK(r.graph.node(n.inputs[0]).dtype == DType::bf16);
      CHECK(r.graph.node(n.inputs[1]).dtype == DType::bf16);
      CHECK(n.dtype == DType::f32);
    }
    casts += n.op == tj::Op::Cast && n.dtype == DType::bf16;
    if (n.op == tj::Op::Variable) CHECK(n.dtype == DType::f32);
  }
  CHECK(products == 5);  // 2 forward, 3 backward (fc1's input gradient is not needed)
  CHECK(casts == 10);
  std::vector<int> ids;
  for (const tj::Tensor& t : mixed) ids.push_back(t.id());
  const tj::kir::Program p = tj::lower_graph(r.graph, ids, {}).program;
  // The kernel of fc1's bias add and ReLU also rounds its result to bf16 for fc2's product: no
  // kernel of the program is a cast alone with an activation as its operand.
  const std::string text = tj::kir::to_string(p);
  INFO(text);
  CHECK(text.find("_cast_add_relu over [B,5]") != std::string::npos);
  // The backward's transposed operands (x^T, h^T, W^T) are cast before their transpose, which
  // folds into the products' flags: no kernel transposes, and each cast is the forward's.
  CHECK(text.find("transpose") == std::string::npos);
  CHECK(text.find("^T") != std::string::npos);
  // A cast alone in a kernel (or a group's part) reads a variable or an input, never a value
  // another kernel computed.
  auto check_part = [&](const tj::kir::Kernel& k) {
    bool cast = false, computes = false;
    for (const auto& e : k.exprs) {
      cast = cast || e.op == tj::Op::Cast;
      computes = computes || e.kind == tj::kir::Expr::Kind::binary ||
                 (e.kind == tj::kir::Expr::Kind::unary && e.op != tj::Op::Cast);
    }
    if (!cast || computes) return;
    for (const auto& e : k.exprs)
      if (e.kind == tj::kir::Expr::Kind::load)
        CHECK(p.buffers[k.accesses[e.access].buffer].kind != tj::kir::Buffer::Kind::temp);
  };
  for (const tj::kir::Kernel& k : p.kernels) {
    if (k.parts.empty()) check_part(k);
    for (const tj::kir::Kernel& part : k.parts) check_part(part);
  }
  tj::reference::Feeds feeds{{"x", random_array({7, 6}, 9, -1, 1)}};
  require_jit_matches(r.graph, mixed, feeds, tj::reference::initialize_variables(r.graph, 3), "bf16 policy MLP");
}

// The policy declared once: a CpuProgram of a training graph compiled under it computes what the
// reference computes on the rewritten graph, an SGD step included.
TEST_CASE("half floats: programs compiled under the bf16 policy match the reference on the rewritten graph",
          "[half][cpu][jit]") {
  struct Restore {
    ~Restore() { tj::set_precision_policy({}); }
  } restore;
  tj::set_precision_policy({.matmul_operands = DType::bf16});
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 6});
  auto y = tj::dense(tj::relu(tj::dense(x, 5, "fc1")), 3, "fc2");
  auto loss = tj::mean(y * y);
  auto vars = tj::trainable_variables();
  auto grads = tj::grad(loss, vars);
  for (size_t i = 0; i < vars.size(); ++i) tj::assign(vars[i], vars[i] - 0.1f * grads[i]);
  const tj::reference::Variables initial = tj::reference::initialize_variables(g, 3);
  tj::HostVariables hv;
  for (const auto& [name, a] : initial) hv[name] = to_host(a);
  tj::CpuProgram program(g, {loss}, true);
  const std::vector<tj::HostTensor> out = program.run({{"x", to_host(random_array({7, 6}, 9, -1, 1))}}, hv);
  CHECK(program.llvm_ir().find(", 4194304") != std::string::npos);  // the kernels round to bf16
  // The reference on the graph the pass wrote, update ops included.
  tj::Rewritten r = tj::half_matmul_operands(g, DType::bf16);
  const std::vector<tj::Tensor> fetches = tj::remap_tensors(r, {loss});
  tj::reference::Variables rv = initial;
  JitRun run;
  reference_side(run, r.graph, fetches, {{"x", random_array({7, 6}, 9, -1, 1)}}, rv, true, 0);
  run.jit.push_back(to_array(out[0]));
  for (const auto& [name, a] : rv) run.jit.push_back(to_array(hv.at(name)));
  require_close(run, "bf16 policy SGD step");
  tj::set_precision_policy({});
  CHECK(tj::precision_policy().matmul_operands == DType::f32);
  CHECK_THROWS_WITH(tj::set_precision_policy({.matmul_operands = DType::i32}),
                    Catch::Contains("matrix products cannot take their operands in i32"));
}

// The policy as a trainer's option: a Towers value's precision() wins over the process-wide
// policy, so two trainers in one process can differ. Oracle: a trainer under Towers::precision
// steps bitwise as one under the same process-wide policy, and precision({f32}) under a bf16
// process policy steps bitwise as a plain f32 trainer; bf16 and f32 steps differ.
TEST_CASE("half floats: Towers::precision is the trainer policy and wins over the process policy", "[half][cpu][jit]") {
  struct Restore {
    ~Restore() { tj::set_precision_policy({}); }
  } restore;
  struct Run {
    std::unique_ptr<tj::Graph> graph = std::make_unique<tj::Graph>();
    std::unique_ptr<tj::TowerTrainer> trainer;
  };
  auto make = [](const tj::Towers& towers) {
    Run r;
    tj::GraphScope use(*r.graph);
    auto x = tj::input("x", {kBatch, 6});
    auto y = tj::dense(tj::relu(tj::dense(x, 5, "fc1")), 3, "fc2");
    r.trainer = std::make_unique<tj::TowerTrainer>(*r.graph, tj::mean(y * y), towers, tj::sgd(0.1));
    return r;
  };
  const tj::Towers plain{tj::cpu(0)};
  Run own_bf16 = make(plain.precision({.matmul_operands = DType::bf16}));
  CHECK(tj::precision_policy().matmul_operands == DType::f32);  // the scope ended with the build
  Run f32 = make(plain);
  tj::set_precision_policy({.matmul_operands = DType::bf16});
  Run process_bf16 = make(plain);
  Run own_f32 = make(plain.precision({.matmul_operands = DType::f32}));
  tj::set_precision_policy({});
  CHECK(plain.precision({.matmul_operands = DType::bf16}).str().find("precision=bf16") != std::string::npos);

  const tj::HostVariables initial = own_bf16.trainer->variables();
  const tj::HostFeeds batch{{"x", to_host(random_array({7, 6}, 9, -1, 1))}};
  std::vector<tj::HostVariables> after;
  for (Run* r : {&own_bf16, &process_bf16, &f32, &own_f32}) {
    for (const auto& [name, t] : initial) r->trainer->variables().at(name) = t;
    r->trainer->step(batch);
    after.push_back(r->trainer->variables());
  }
  bool bf16_differs = false;
  for (const auto& [name, t] : initial) {
    INFO(name);
    CHECK(after[0].at(name).f32 == after[1].at(name).f32);
    CHECK(after[2].at(name).f32 == after[3].at(name).f32);
    bf16_differs = bf16_differs || after[0].at(name).f32 != after[2].at(name).f32;
  }
  CHECK(bf16_differs);
  CHECK_THROWS_WITH(plain.precision({.matmul_operands = DType::i32}),
                    Catch::Contains("Towers::precision: matrix products cannot take their operands in i32"));
}

// The conv policy (PrecisionPolicy::conv_operands): every convolution, forward and both
// gradients, reads its operands rounded to bf16 and stores its result in bf16 (cuDNN's 16-bit
// convolutions), widened back for its readers. Oracles: the forward output under the policy is
// bitwise that of an f32 program computing the same with hand-written casts; the whole training
// step computes what the reference computes on the graph the pass wrote, within its bounds; and
// the matmul policy alone leaves the convolutions in f32.
TEST_CASE("half floats: the conv policy rounds every convolution's operands, forward and backward", "[half][cpu][jit]") {
  struct Restore {
    ~Restore() { tj::set_precision_policy({}); }
  } restore;
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 2, 7, 7});
  auto w = tj::variable("w", {3, 2, 3, 3}, {.init = tj::init::uniform(-1, 1)});
  auto y = tj::conv2d(x, w, {.stride = 1, .pad = 1});
  auto loss = tj::mean(y * y);
  auto grads = tj::grad(loss, {w, x});
  tj::assign(w, w - 0.1f * grads[0]);
  // A second input's convolution, rounded by hand: cast(cast(., bf16), f32) on both operands
  // and on the result.
  auto xr = tj::input("x_rounded", {kBatch, 2, 7, 7});
  auto rounded = [](tj::Tensor t) { return tj::cast(tj::cast(t, DType::bf16), DType::f32); };
  auto by_hand = rounded(tj::conv2d(rounded(xr), rounded(w), {.stride = 1, .pad = 1}));

  tj::Rewritten r = tj::half_conv_operands(g, DType::bf16);
  int convolutions = 0;
  for (int id = 0; id < r.graph.size(); ++id) {
    const tj::Node& n = r.graph.node(id);
    if (n.op == tj::Op::Cast && r.graph.node(n.inputs[0]).dtype == DType::bf16) {
      const tj::Op from = r.graph.node(n.inputs[0]).op;
      if (from == tj::Op::Conv2D || from == tj::Op::Conv2DGradInput || from == tj::Op::Conv2DGradFilter)
        CHECK(n.dtype == DType::f32);  // the result widened for its readers
    }
    if (n.op != tj::Op::Conv2D && n.op != tj::Op::Conv2DGradInput && n.op != tj::Op::Conv2DGradFilter) continue;
    ++convolutions;
    CHECK(n.dtype == DType::bf16);
    for (int in : n.inputs) {
      const tj::Node& round = r.graph.node(in);
      REQUIRE(round.op == tj::Op::Cast);
      CHECK(round.dtype == DType::bf16);
    }
  }
  CHECK(convolutions == 4);  // the forward, both gradients, and by_hand

  const tj::reference::Variables initial = tj::reference::initialize_variables(g, 3);
  const tj::reference::Array xa = random_array({5, 2, 7, 7}, 4, -2, 2);
  auto run = [&](const tj::PrecisionPolicy& policy, std::vector<tj::Tensor> fetches, bool updates) {
    tj::set_precision_policy(policy);
    tj::HostVariables hv;
    for (const auto& [name, a] : initial) hv[name] = to_host(a);
    tj::CpuProgram program(g, fetches, updates);
    tj::set_precision_policy({});
    std::vector<tj::HostTensor> out = program.run({{"x", to_host(xa)}, {"x_rounded", to_host(xa)}}, hv);
    if (updates) out.push_back(hv.at("w"));
    return out;
  };
  const auto policy = run({.conv_operands = DType::bf16}, {y}, false);
  const auto plain = run({}, {y, by_hand}, false);
  CHECK(policy[0].f32 == plain[1].f32);  // bitwise
  const auto matmul_only = run({.matmul_operands = DType::bf16, .conv_operands = DType::f32}, {y}, false);
  const auto both = run({.matmul_operands = DType::bf16}, {y}, false);  // conv_operands unset: the same dtype
  CHECK(plain[0].f32 != policy[0].f32);
  CHECK(matmul_only[0].f32 == plain[0].f32);
  CHECK(both[0].f32 == policy[0].f32);

  const auto step = run({.conv_operands = DType::bf16}, {loss, grads[1]}, true);
  const std::vector<tj::Tensor> fetches = tj::remap_tensors(r, {loss, grads[1]});
  tj::reference::Variables rv = initial;
  JitRun check;
  reference_side(check, r.graph, fetches, {{"x", xa}, {"x_rounded", xa}}, rv, true, 0);
  check.jit.push_back(to_array(step[0]));
  check.jit.push_back(to_array(step[1]));  // dx, the input gradient
  REQUIRE(rv.size() == 1);  // w, the one variable
  check.jit.push_back(to_array(step[2]));
  require_close(check, "bf16 conv policy SGD step");
  CHECK_THROWS_WITH(tj::set_precision_policy({.conv_operands = DType::i32}),
                    Catch::Contains("set_precision_policy: convolutions cannot take their operands in i32"));
  CHECK(tj::Towers{tj::cpu(0)}.precision({.matmul_operands = DType::bf16, .conv_operands = DType::f32}).str().find(
            "precision=matmul bf16, conv f32") != std::string::npos);
}

// Max pools under the conv policy take and give 16-bit values (jit/passes/half_convolutions.h):
// rounding is monotonic, so the pool of the rounded feature map is bitwise the f32 pool of it,
// for overlapping padded windows and plain 2x2 ones, at batch 7 (odd planes), bf16 and f16; a
// NaN in a window wins it as in f32.
TEST_CASE("half floats: max pools under the conv policy are the f32 pools of the rounded maps, bitwise", "[half][cpu][jit]") {
  struct Restore {
    ~Restore() { tj::set_precision_policy({}); }
  } restore;
  for (const DType t : {DType::bf16, DType::f16})
    for (const tj::Pool2DOptions pool : {tj::Pool2DOptions{.kernel = 3, .stride = 2, .pad = 1}, tj::Pool2DOptions{}}) {
      INFO(tj::dtype_name(t) << ", kernel " << pool.kernel);
      tj::Graph g;
      tj::GraphScope use(g);
      auto x = tj::input("x", {kBatch, 3, 9, 9});
      auto w = tj::variable("w", {5, 3, 3, 3}, {.init = tj::init::uniform(-1, 1)});
      auto rounded = [t](tj::Tensor v) { return tj::cast(tj::cast(v, t), DType::f32); };
      auto y = tj::max_pool2d(tj::relu(tj::conv2d(x, w, {.stride = 1, .pad = 1})), pool);
      auto by_hand = tj::max_pool2d(tj::relu(rounded(tj::conv2d(rounded(x), rounded(w), {.stride = 1, .pad = 1}))), pool);
      tj::reference::Array xa = random_array({7, 3, 9, 9}, 5, -2, 2);
      xa.data[40] = std::numeric_limits<double>::quiet_NaN();
      tj::HostVariables hv;
      for (const auto& [name, a] : tj::reference::initialize_variables(g, 3)) hv[name] = to_host(a);
      tj::set_precision_policy({.conv_operands = t});
      tj::CpuProgram policy(g, {y}, false);
      tj::set_precision_policy({});
      tj::CpuProgram plain(g, {by_hand}, false);
      const tj::HostTensor a = policy.run({{"x", to_host(xa)}}, hv)[0], b = plain.run({{"x", to_host(xa)}}, hv)[0];
      CHECK(std::memcmp(a.f32.data(), b.f32.data(), a.f32.size() * 4) == 0);
      CHECK(std::any_of(a.f32.begin(), a.f32.end(), [](float v) { return std::isnan(v); }));
      CHECK(policy.program().calls.size() == plain.program().calls.size());
      bool half_pool = false;
      for (const tj::kir::LibraryCall& c : policy.program().calls)
        half_pool = half_pool || (c.op == tj::Op::MaxPool2D && policy.program().buffers[c.output].dtype == t);
      CHECK(half_pool);
    }
}

// The CPU's 16-bit convolution rounds its f32 sums as dsl/half_float.h does, in the cases a
// random test rarely meets: a 1x2 filter of ones sums pairs of bf16 values exactly in f32 into
// ties (to even, down and up), a NaN, a sum past the largest bf16 (infinity) and a tie at the
// top of the range that rounds to infinity. Oracle: half_bits of the f32 sum.
TEST_CASE("half floats: the CPU's 16-bit convolution rounds its sums to nearest even, NaN and overflow included",
          "[half][cpu]") {
  const float big = 0x1.FEp127f, nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<float, float>> pairs = {
      {1.0f, 0x1p-8f}, {1.0f + 0x1p-7f, 0x1p-8f}, {-1.0f, -0x1p-8f}, {3.0f, 0x1p-7f}, {nan, 1.0f},
      {-nan, 1.0f},    {big, big},                {big, 0x1p119f},   {0x1p-126f, 0x1p-133f}, {0.0f, -0.0f}};
  const int64_t n = static_cast<int64_t>(pairs.size());
  std::vector<uint16_t> x, w = {tj::half_bits(1.0, DType::bf16), tj::half_bits(1.0, DType::bf16)}, y(n);
  for (const auto& [a, b] : pairs) {
    x.push_back(tj::half_bits(a, DType::bf16));
    x.push_back(tj::half_bits(b, DType::bf16));
    REQUIRE((std::isnan(a) || tj::half_value(x[x.size() - 2], DType::bf16) == a));  // bf16 values
  }
  tj::Attrs at;
  at.stride[0] = 1, at.stride[1] = 2;
  at.pad[0] = 0, at.pad[1] = 0;
  const tj::cpujit::View xv{tj::Shape({1, 1, 1, 2 * n}), x.data(), DType::bf16}, wv{tj::Shape({1, 1, 1, 2}), w.data(), DType::bf16},
      yv{tj::Shape({1, 1, 1, n}), y.data(), DType::bf16};
  tj::cpujit::half_convolution(tj::Op::Conv2D, at, xv, wv, yv, nullptr);
  for (int64_t i = 0; i < n; ++i) {
    INFO("pair " << i);
    const float sum = static_cast<float>(tj::half_value(x[2 * i], DType::bf16)) +
                      static_cast<float>(tj::half_value(x[2 * i + 1], DType::bf16));
    CHECK(y[i] == tj::half_bits(sum, DType::bf16));
  }
}
