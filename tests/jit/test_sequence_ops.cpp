// The sequence-model ops through the CPU JIT equal the reference interpreter within their
// error bounds (tests/jit/sequence_cases.h, run on a GPU too), an index out of range is the
// same error on both, and the fusion plan of each op is what docs/dsl.md says it is.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "graph_cases.h"
#include "jit/passes/pipeline.h"
#include "jit_check.h"
#include "sequence_cases.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;
using Catch::Contains;

namespace {

cases::Runner on_cpu() {
  return [](const tj::Graph& g, const std::vector<Tensor>& fetches, const tj::reference::Feeds& feeds,
            tj::reference::Variables& vars, bool updates, uint64_t step) {
    return run_both(g, fetches, feeds, vars, updates, nullptr, step);
  };
}

tj::kir::Program lower(const tj::Graph& g, const std::vector<Tensor>& fetches) {
  std::vector<int> ids;
  for (const Tensor& t : fetches) ids.push_back(t.id());
  return tj::lower_graph(g, ids, {}).program;
}

int count(const tj::kir::Program& p, tj::kir::Step::Kind kind) {
  return static_cast<int>(
      std::count_if(p.steps.begin(), p.steps.end(), [&](const tj::kir::Step& s) { return s.kind == kind; }));
}

int calls_of(const tj::kir::Program& p, tj::Op op) {
  return static_cast<int>(
      std::count_if(p.calls.begin(), p.calls.end(), [&](const tj::kir::LibraryCall& c) { return c.op == op; }));
}

std::string here(int line) { return "tests/jit/test_sequence_ops.cpp:" + std::to_string(line); }

}  // namespace

TEST_CASE("gathers and embeddings match the reference, gradients included", "[cpu][jit][sequence]") {
  cases::gathers_and_embeddings(on_cpu(), "");
}

TEST_CASE("iota, causal masks and a masked softmax match the reference", "[cpu][jit][sequence]") {
  cases::iota_and_masks(on_cpu(), "");
}

TEST_CASE("layer_norm, rms_norm and softmax match the reference forward and backward", "[cpu][jit][sequence][isa]") {
  cases::norms_and_softmax(on_cpu(), "");
}

TEST_CASE("composed layer_norm and rms_norm match the reference forward and backward", "[cpu][jit][sequence]") {
  cases::norms_and_softmax(on_cpu(), "", false);
}

TEST_CASE("unfused attention matches the reference, causal and not, gradients included", "[cpu][jit][sequence]") {
  cases::attention(on_cpu(), "");
}

TEST_CASE("fused attention matches the reference, causal and not, gradients included", "[cpu][jit][sequence][attention][isa]") {
  cases::attention(on_cpu(), "", true);
}

TEST_CASE("fused attention of unequal queries and keys, shared heads and a second key tile matches the reference", "[cpu][jit][sequence][attention][isa]") {
  cases::attention_shapes(on_cpu(), "");
}

TEST_CASE("fused attention at head dimensions of 16 and more matches the reference", "[cpu][jit][sequence][attention][isa]") {
  cases::attention_wide_heads(on_cpu(), "");
}

namespace {

// Whether the program holds a buffer whose last two axes are [t, t]: a score or probability
// matrix of attention over t positions.
bool holds_square(const tj::kir::Program& p, int64_t t) {
  for (const tj::kir::Buffer& b : p.buffers) {
    const int r = b.shape.rank();
    if (r >= 2 && b.shape[r - 2] == t && b.shape[r - 1] == t) return true;
  }
  return false;
}

}  // namespace

// The bar: the forward does not allocate [B,H,T,T], read from the buffer plan; nor
// does the training step. The composed form, for contrast, does.
TEST_CASE("fused attention's buffer plan holds no B x H x T x T buffer, forward or backward", "[cpu][jit][sequence][attention]") {
  constexpr int64_t kT = 127;
  for (bool fused : {true, false}) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto q = tj::input("q", {kBatch, 2, kT, 5}), k = tj::input("k", {kBatch, 2, kT, 5}), v = tj::input("v", {kBatch, 2, kT, 3});
    auto y = tj::scaled_dot_product_attention(q, k, v, {.causal = true, .fused = fused});
    auto loss = tj::sum(y * y);
    const std::vector<Tensor> d = tj::grad(loss, {q, k, v});
    const tj::kir::Program forward = lower(g, {y}), step = lower(g, {loss, d[0], d[1], d[2]});
    INFO((fused ? "fused" : "composed") << " forward:\n" << tj::kir::to_string(forward));
    CHECK(holds_square(forward, kT) == !fused);
    CHECK(holds_square(step, kT) == !fused);
    if (!fused) continue;
    CHECK(calls_of(forward, tj::Op::Attention) == 1);
    CHECK(calls_of(forward, tj::Op::MatMul) == 0);
    CHECK(calls_of(step, tj::Op::Attention) == 1);
    CHECK(calls_of(step, tj::Op::AttentionGradQ) == 1);
    CHECK(calls_of(step, tj::Op::AttentionGradKV) == 1);
    for (const tj::kir::Buffer& b : step.buffers)  // nothing above [B,2,T,8], the widest operand
      CHECK(b.shape.elements(1) <= 2 * kT * 8);
  }
}

TEST_CASE("iota and a causal mask have the closed form's values", "[cpu][jit][sequence]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 2});
  auto rows = tj::iota({kBatch, 2}, 0);
  auto mask = tj::causal_mask(3);
  tj::HostFeeds feeds{{"x", tj::HostTensor(tj::Shape{4, 2})}};
  tj::HostVariables vars;
  const auto out = tj::CpuProgram(g, {rows, mask, x}).run(feeds, vars);
  CHECK(out[0].i32 == std::vector<int32_t>{0, 0, 1, 1, 2, 2, 3, 3});
  CHECK(out[1].f32 == std::vector<float>{1, 0, 0, 1, 1, 0, 1, 1, 1});
}

TEST_CASE("an index out of range is named with its input and position", "[cpu][jit][sequence]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto ids = tj::input("ids", {kBatch, 3}, tj::DType::i32);
  tj::Tensor e;
  {
    tj::VariableScope scope("lm");
    e = tj::embedding(ids, 10, 4, "embed");  // the line the message names
  }
  const int line = __LINE__ - 2;
  tj::reference::Array bad({2, 3}, {1, 2, 3, 4, 12, -1}, tj::DType::i32);
  tj::reference::Variables vars = tj::reference::initialize_variables(g, 1);
  REQUIRE_THROWS_WITH(tj::reference::run(g, {e}, {{"ids", bad}}, vars),
                      Contains("gather: index 12 at [1,1] of input \"ids\" is out of range [0, 10) in \"lm/embed\"; an index must name a row of the table's axis 0 (for an embedding: ids below the vocabulary size, 10)") && Contains(here(line)));
  tj::HostVariables hv{{"lm/embed/embeddings", to_host(vars.at("lm/embed/embeddings"))}};
  tj::HostFeeds hf{{"ids", to_host(bad)}};
  std::string reference_message, cpu_message;
  try { tj::reference::run(g, {e}, {{"ids", bad}}, vars); } catch (const tj::Error& err) { reference_message = err.what(); }
  try { tj::CpuProgram(g, {e}).run(hf, hv); } catch (const tj::Error& err) { cpu_message = err.what(); }
  CHECK(cpu_message == reference_message);
  // A computed index, and a negative one: "the indices", the value as it is.
  const int gather_line = __LINE__ + 1;
  auto shifted = tj::gather(tj::input("table", {5, 2}), tj::input("k", {kBatch}, tj::DType::i32) - 1);
  tj::reference::Variables none;
  REQUIRE_THROWS_WITH(tj::reference::run(g, {shifted}, {{"table", tj::reference::Array({5, 2})}, {"k", tj::reference::Array({3}, {1, 0, 2}, tj::DType::i32)}}, none),
                      Contains("gather: index -1 at 1 of the indices is out of range [0, 5)") && Contains(here(gather_line)));
}

TEST_CASE("an embedding's step gathers and scatters its rows without a one-hot B x T x V tensor", "[cpu][jit][sequence]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto ids = tj::input("ids", {kBatch, 16}, tj::DType::i32);
  auto h = tj::embedding(ids, 4096, 8, "embed");
  auto loss = tj::sum(h * h);
  auto d = tj::grad(loss, tj::trainable_variables());
  const tj::kir::Program p = lower(g, {loss, d[0]});
  CHECK(calls_of(p, tj::Op::Gather) == 1);
  CHECK(calls_of(p, tj::Op::GatherGrad) == 1);
  CHECK(calls_of(p, tj::Op::MatMul) == 0);
  CHECK(calls_of(p, tj::Op::OneHot) == 0);
  for (const tj::kir::Buffer& b : p.buffers)  // nothing as large as [B,16,4096]
    CHECK(b.shape.elements(1) <= 4096 * 8);
}

TEST_CASE("a causal mask is computed inside the kernel that reads it", "[cpu][jit][sequence]") {
  for (bool fused : {false, true}) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch, 7, 7});
    auto p = tj::softmax(tj::where(tj::causal_mask(7) > 0.5, x, tj::Operand(-1e9)), {.fused = fused});
    const tj::kir::Program prog = lower(g, {p});
    for (const tj::kir::Buffer& b : prog.buffers) CHECK(b.shape != tj::Shape{7, 7});  // no mask buffer
    if (fused) {  // the masked scores written by one kernel, then the fused softmax reads them
      CHECK(count(prog, tj::kir::Step::Kind::kernel) == 1);
      CHECK(calls_of(prog, tj::Op::Softmax) == 1);
    } else {  // the mask inside both: the row's log-sum-exp, then exp(x - lse)
      CHECK(prog.calls.empty());
      CHECK(count(prog, tj::kir::Step::Kind::kernel) == 2);
    }
  }
}

namespace {

// The loop kernels and library calls of the program for `fetches`, and how many of the
// kernels reduce.
struct PlanCount {
  int kernels = 0, reductions = 0, calls = 0;
};

PlanCount plan_of(const tj::Graph& g, const std::vector<Tensor>& fetches, bool print, const std::string& what) {
  const tj::kir::Program p = lower(g, fetches);
  PlanCount c;
  for (const tj::kir::Kernel& k : p.kernels)
    for (const tj::kir::Kernel* body : k.bodies()) c.reductions += body->reduce != tj::Op::Constant;
  c.kernels = count(p, tj::kir::Step::Kind::kernel);
  c.calls = count(p, tj::kir::Step::Kind::library);
  if (print) std::printf("== %s: %d kernels (%d reducing), %d calls\n%s\n", what.c_str(), c.kernels, c.reductions, c.calls, tj::kir::to_string(p).c_str());
  return c;
}

}  // namespace

TEST_CASE("the normalisations and softmax: their kernels forward and backward", "[cpu][jit][sequence]") {
  const bool print = std::getenv("SEQUENCE_PLAN_PRINT") != nullptr;
  struct Case {
    const char* op;
    bool fused;
    std::array<int, 6> want;  // forward: kernels, reducing, calls; with the backward: the same
  };
  // docs/dsl.md's table ("How the normalisations and softmax fuse").
  const Case cases[] = {{"layer_norm", true, {0, 0, 1, 1, 0, 3}}, {"rms_norm", true, {0, 0, 1, 0, 0, 3}},
                        {"layer_norm", false, {3, 2, 0, 5, 3, 0}}, {"rms_norm", false, {2, 1, 0, 4, 2, 0}},
                        {"softmax", true, {0, 0, 1, 0, 0, 2}}, {"softmax", false, {2, 1, 0, 4, 2, 0}}};
  for (const Case& c : cases) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch, 16, 64});
    const std::string name = c.op;
    const tj::NormOptions options{.fused = c.fused};
    Tensor y = name == "layer_norm" ? tj::layer_norm(x, "ln", options)
               : name == "rms_norm" ? tj::rms_norm(x, "rms", options) : tj::softmax(x, {.fused = c.fused});
    auto loss = tj::sum(y * tj::input("r", {kBatch, 16, 64}));
    std::vector<Tensor> wrt = tj::trainable_variables();
    wrt.push_back(x);
    const auto grads = tj::grad(loss, wrt);
    const std::string what = name + (c.fused ? "" : " (composed)");
    const PlanCount fwd = plan_of(g, {y}, print, what + " forward");
    std::vector<Tensor> all{y};
    all.insert(all.end(), grads.begin(), grads.end());
    const PlanCount both = plan_of(g, all, print, what + " forward and backward");
    INFO(what << ": forward " << fwd.kernels << " kernels, " << fwd.calls << " calls; with the backward "
              << both.kernels << " kernels, " << both.calls << " calls");
    CHECK(std::array<int, 6>{fwd.kernels, fwd.reductions, fwd.calls, both.kernels, both.reductions, both.calls} ==
          c.want);
    if (!c.fused || name == "softmax") continue;
    const tj::kir::Program step = lower(g, all);
    CHECK(calls_of(step, tj::Op::LayerNorm) == 1);
    CHECK(calls_of(step, tj::Op::LayerNormGradInput) == 1);
    CHECK(calls_of(step, tj::Op::LayerNormGradParams) == 1);
    for (const tj::kir::Buffer& b : step.buffers)  // no per-row statistics stored: x, y, dy, dx
      CHECK((b.shape.rank() < 2 || b.shape[b.shape.rank() - 1] != 1));
  }
}

// Not run by default (hidden): the figures of docs/dsl.md's "A gather's gradient". Three
// steps (the loss and the table's gradient) of an embedding of ids [64, 32] into D = 128, by
// gather and by the one-hot product it replaces, and the largest temporary buffer of each.
TEST_CASE("embedding by gather against one_hot times the table: time and largest buffer", "[.][bench][sequence]") {
  for (int64_t vocab : {256, 4096, 16384})
    for (bool by_gather : {true, false}) {
      tj::Graph g;
      tj::GraphScope use(g);
      auto ids = tj::input("ids", {kBatch, 32}, tj::DType::i32);
      auto table = tj::variable("table", {vocab, 128}, {.init = tj::init::normal(0, 1)});
      Tensor h = by_gather ? tj::gather(table, ids) : tj::matmul(tj::one_hot(ids, vocab), table);
      auto loss = tj::sum(h * h);
      auto d = tj::grad(loss, {table})[0];
      int64_t largest = 0;
      for (const tj::kir::Buffer& b : lower(g, {loss, d}).buffers)
        if (b.kind == tj::kir::Buffer::Kind::temp) largest = std::max(largest, b.shape.elements(64));
      tj::HostTensor idv(tj::Shape{64, 32}, tj::DType::i32);
      for (size_t i = 0; i < idv.i32.size(); ++i) idv.i32[i] = static_cast<int32_t>((i * 7919) % vocab);
      tj::HostFeeds feeds{{"ids", idv}};
      tj::HostVariables vars{{"table", tj::HostTensor(tj::Shape{vocab, 128})}};
      tj::CpuProgram p(g, {loss, d});
      p.run(feeds, vars);  // compiled and warm
      const auto t0 = std::chrono::steady_clock::now();
      for (int s = 0; s < 3; ++s) p.run(feeds, vars);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("V = %5ld  %-15s  3 steps %.3f s  largest temp %.1f MB\n", static_cast<long>(vocab),
                  by_gather ? "gather" : "one_hot x table", secs, static_cast<double>(largest) * 4 / 1e6);
    }
}

// Not run by default (hidden): the figures of docs/dsl.md's softmax paragraph. The forward and
// backward of a softmax over [64, 16, 512] (1,024 rows; 2 MB a tensor), fused and composed:
// the program's steps (kernels and calls, not the copies of feeds and fetches) timed over 20
// runs of one compiled program each, alternately, three rounds.
TEST_CASE("softmax fused against composed: time forward and backward", "[.][bench][sequence]") {
  for (int round = 0; round < 3; ++round)
    for (bool fused : {true, false}) {
      tj::Graph g;
      tj::GraphScope use(g);
      auto x = tj::input("x", {kBatch, 16, 512});
      auto y = tj::softmax(x, {.fused = fused});
      auto dx = tj::grad(tj::sum(y * tj::input("r", {kBatch, 16, 512})), {x})[0];
      tj::HostTensor xv(tj::Shape{64, 16, 512}), rv(tj::Shape{64, 16, 512});
      for (size_t i = 0; i < xv.f32.size(); ++i) {
        xv.f32[i] = static_cast<float>((i * 7919) % 1000) / 100.0f;
        rv.f32[i] = static_cast<float>((i * 104729) % 1000) / 1000.0f;
      }
      tj::HostFeeds feeds{{"x", xv}, {"r", rv}};
      tj::HostVariables none;
      tj::CpuProgram p(g, {y, dx});
      p.run(feeds, none);  // compiled and warm
      std::vector<double> times;  // per step of the program, summed over the runs
      p.step_times = &times;
      for (int s = 0; s < 20; ++s) p.run(feeds, none);
      double ms = 0;
      for (double t : times) ms += t / 20;
      std::printf("round %d  %-8s  forward and backward %.3f ms a run; its steps:", round, fused ? "fused" : "composed", ms);
      for (double t : times) std::printf(" %.3f", t / 20);
      std::printf(" ms\n");
    }
}
