// Fusion tests on the kernel IR's text (golden, like Triton's pass tests): build a small graph,
// lower it the way CpuProgram does (graph passes, then fusion), and compare
// kir::to_string(program) with the text written out here. A golden that changes on purpose is
// rewritten from the new output after reading it; an accidental change fails here first.
#include <catch2/catch.hpp>

#include <regex>
#include <set>

#include "jit/passes/fusion_plan.h"
#include "jit/passes/lower.h"
#include "jit/passes/pipeline.h"
#include "jit/reference/interpreter.h"
#include "jit_check.h"
#include "runtime/cpu/cpu_program.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

// The program CpuProgram would compile for `fetches`.
tj::kir::Program lower(const tj::Graph& g, const std::vector<Tensor>& fetches) {
  std::vector<int> ids;
  for (const Tensor& t : fetches) ids.push_back(t.id());
  return tj::lower_graph(g, ids, {}).program;
}

// The program's text with kernel names cut to their index ("kernel k0_relu_mul_add over" reads
// "kernel k0 over", a group's "part k3_sub_mul over" reads "part k3 over"): the name lists the
// fused ops for dumps, the body already says what is fused.
std::string ir_text(const tj::kir::Program& p) {
  return std::regex_replace(tj::kir::to_string(p),
                            std::regex("^(kernel|part) (k[0-9]+)[^ ]* over", std::regex::multiline),
                            "$1 $2 over");
}

std::string ir(const tj::Graph& g, const std::vector<Tensor>& fetches) { return ir_text(lower(g, fetches)); }

// The golden text starts after the raw string's first newline.
std::string golden(const char* text) { return std::string(text).substr(1); }

// Inputs "x0", "x1", ... of [B, 3] in the current graph, each fed 5 random examples.
std::vector<Tensor> fed_inputs(int n, tj::reference::Feeds& feeds, uint32_t seed) {
  std::vector<Tensor> xs;
  for (int i = 0; i < n; ++i) {
    xs.push_back(tj::input("x" + std::to_string(i), {kBatch, 3}));
    feeds["x" + std::to_string(i)] = random_array({5, 3}, seed + i);
  }
  return xs;
}

int count_steps(const tj::kir::Program& p, tj::kir::Step::Kind kind) {
  return static_cast<int>(std::count_if(p.steps.begin(), p.steps.end(),
                                        [&](const tj::kir::Step& s) { return s.kind == kind; }));
}

}  // namespace

TEST_CASE("relu(x*w+b) is one kernel", "[jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 8});
  auto w = tj::input("w", {8});
  auto b = tj::input("b", {8});
  CHECK(ir(g, {tj::relu(x * w + b)}) == golden(R"(
b0 = input "x" f32[B,8]
b1 = input "w" f32[8]
b2 = input "b" f32[8]
b3 = temp "t3" f32[B,8]
kernel k0 over [B,8]
  e0 = load b0[i0*8 + i1] : f32
  e1 = load b1[i1] : f32
  e2 = mul e0, e1 : f32
  e3 = load b2[i1] : f32
  e4 = add e2, e3 : f32
  e5 = relu e4 : f32
  store b3[i0*8 + i1] = e5
fetch b3
)"));
}

TEST_CASE("relu(dense(x)) is one matmul call with a bias+relu epilogue, no kernel after it, with the gradient too",
          "[jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 8});
  auto h = tj::relu(tj::dense(x, 4, "fc"));
  // Forward only: bias and ReLU are the GEMM's epilogue (jit/passes/epilogues.h), which
  // writes the activation (b4) directly; the product's own temporary (b2) is left unused.
  CHECK(ir(g, {h}) == golden(R"(
b0 = input "x" f32[B,8]
b1 = variable "fc/kernel" f32[8,4]
b2 = temp "t2" f32[B,4]
b3 = variable "fc/bias" f32[4]
b4 = temp "t4" f32[B,4]
call matmul b0, b1, b3 -> b4 (epilogue bias+relu)
fetch b4
)"));
  // With the gradient: the ReLU gradient masks on the activation (relu(x) > 0 exactly where
  // x > 0), so the forward stores only the activation (b4) and the epilogue holds; the
  // bias-gradient sum stores the masked gradient (b6) that the kernel-gradient GEMM reads, with
  // x read transposed.
  auto grads = tj::grad(tj::sum(h * h), tj::trainable_variables());
  CHECK(ir(g, {h, grads[0], grads[1]}) == golden(R"(
b0 = input "x" f32[B,8]
b1 = variable "fc/kernel" f32[8,4]
b2 = temp "t2" f32[B,4]
b3 = variable "fc/bias" f32[4]
b4 = temp "t4" f32[B,4]
b5 = temp "t5" f32[4]
b6 = temp "t6" f32[B,4]
b7 = temp "t7" f32[8,4]
call matmul b0, b1, b3 -> b4 (epilogue bias+relu)
kernel k1 over [B,4] sum axes 0
  e0 = load b4[i0*4 + i1] : f32
  e1 = const 0 : f32
  e2 = greater e0, e1 : f32
  e3 = add e0, e0 : f32
  e4 = select e2, e3, e1 : f32
  store b5[i1] = e4
  store b6[i0*4 + i1] = e4
call matmul b0^T, b6 -> b7
fetch b4 b7 b5
)"));
}

TEST_CASE("softmax composed is two kernels: a row log-sum-exp, then exp(x - lse)", "[jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 10});
  CHECK(ir(g, {tj::softmax(x, {.fused = false})}) == golden(R"(
b0 = input "x" f32[B,10]
b1 = temp "t1" f32[B,1]
b2 = temp "t2" f32[B,10]
kernel k0 over [B,10] reduce_logsumexp axes 1
  e0 = load b0[i0*10 + i1] : f32
  store b1[i0] = e0
kernel k1 over [B,10]
  e0 = load b0[i0*10 + i1] : f32
  e1 = load b1[i0] : f32
  e2 = sub e0, e1 : f32
  e3 = exp e2 : f32
  store b2[i0*10 + i1] = e3
fetch b2
)"));
}

TEST_CASE("softmax is one library call forward and one backward, which reads the forward's output",
          "[jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 10});
  auto y = tj::softmax(x);
  auto dx = tj::grad(tj::sum(y * tj::input("r", {kBatch, 10})), {x})[0];
  CHECK(ir(g, {y, dx}) == golden(R"(
b0 = input "x" f32[B,10]
b1 = temp "t1" f32[B,10]
b2 = input "r" f32[B,10]
b3 = temp "t3" f32[B,10]
call softmax b0 -> b1
call softmax_grad b1, b2 -> b3
fetch b1 b3
)"));
}

TEST_CASE("cross-entropy is one forward kernel of two sibling row reductions and one backward kernel",
          "[cpu][jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto logits = tj::input("logits", {kBatch, 10});
  auto labels = tj::input("label", {kBatch}, tj::DType::i32);
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
  auto dlogits = tj::grad(loss, {logits})[0];
  // k0: the log-sum-exp (b3) and the label term sum(onehot * x) (b4) of each row, in one pass
  // over the logits; k1: their difference, averaged; k2: (softmax - onehot) / B, with the 1/B
  // of the mean's gradient recomputed in place (it reads no memory), not stored.
  CHECK(ir(g, {loss, dlogits}) == golden(R"(
b0 = input "logits" f32[B,10]
b1 = input "label" i32[B]
b2 = temp "t2" f32[B,10]
b3 = temp "t3" f32[B]
b4 = temp "t4" f32[B]
b5 = temp "t5" f32[]
b6 = temp "t6" f32[B,10]
call one_hot b1 -> b2
kernel k0 over [B,10] reduce_logsumexp, sum axes 1
  e0 = load b0[i0*10 + i1] : f32
  e1 = load b2[i0*10 + i1] : f32
  e2 = mul e1, e0 : f32
  store b3[i0] = e0
  store b4[i0] = e2
kernel k1 over [B] mean axes 0
  e0 = load b3[i0] : f32
  e1 = load b4[i0] : f32
  e2 = sub e0, e1 : f32
  store b5[0] = e2
kernel k2 over [B,10]
  e0 = const 1 : f32
  e1 = count B : f32
  e2 = div e0, e1 : f32
  e3 = neg e2 : f32
  e4 = load b2[i0*10 + i1] : f32
  e5 = mul e3, e4 : f32
  e6 = load b0[i0*10 + i1] : f32
  e7 = load b3[i0] : f32
  e8 = sub e6, e7 : f32
  e9 = exp e8 : f32
  e10 = mul e2, e9 : f32
  e11 = add e5, e10 : f32
  store b6[i0*10 + i1] = e11
fetch b5 b6
)"));
  for (int64_t batch : {1, 7, 127}) {
    tj::reference::Array l({batch}, tj::DType::i32);
    for (int64_t i = 0; i < batch; ++i) l[i] = static_cast<double>((i * 3) % 10);
    tj::reference::Variables vars;
    auto r = run_both(g, {loss, dlogits}, {{"logits", random_array({batch, 10}, 13, -6, 6)}, {"label", l}}, vars);
    require_close(r, "cross-entropy at batch " + std::to_string(batch));
  }
}

TEST_CASE("a transpose feeding a matmul is folded into the call", "[jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto a = tj::input("a", {kBatch, 8});
  auto b = tj::input("b", {kBatch, 4});
  CHECK(ir(g, {tj::matmul(tj::transpose(a), b)}) == golden(R"(
b0 = input "a" f32[B,8]
b1 = input "b" f32[B,4]
b2 = temp "t2" f32[8,4]
call matmul b0^T, b1 -> b2
fetch b2
)"));
}

TEST_CASE("a reshape that moves elements is a view of its input's buffer", "[jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 3, 7});
  CHECK(ir(g, {tj::reshape(x, {kBatch, 21})}) == golden(R"(
b0 = input "x" f32[B,3,7]
b1 = temp "t1" f32[B,21] view of b0
fetch b1
)"));
  // Between two kernels: the producer gets a buffer, the consumer reads the view.
  CHECK(ir(g, {tj::reshape(tj::tanh(x), {kBatch, 21}) * 2}) == golden(R"(
b0 = input "x" f32[B,3,7]
b1 = temp "t1" f32[B,3,7]
b2 = temp "t2" f32[B,21] view of b1
b3 = temp "t3" f32[B,21]
kernel k0 over [B,3,7]
  e0 = load b0[i0*21 + i1*7 + i2] : f32
  e1 = tanh e0 : f32
  store b1[i0*21 + i1*7 + i2] = e1
kernel k1 over [B,21]
  e0 = load b2[i0*21 + i1] : f32
  e1 = const 2 : f32
  e2 = mul e0, e1 : f32
  store b3[i0*21 + i1] = e2
fetch b3
)"));
}

TEST_CASE("a mean over the batch divides by the run-time batch B", "[cpu][jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 7});
  auto m = tj::mean(x, {0});
  // Forward: a ReduceMean over the B axis (the emitter divides by the bound B).
  CHECK(ir(g, {m}) == golden(R"(
b0 = input "x" f32[B,7]
b1 = temp "t1" f32[7]
kernel k0 over [B,7] mean axes 0
  e0 = load b0[i0*7 + i1] : f32
  store b1[i1] = e0
fetch b1
)"));
  // Backward: the gradient divides by `count B`, a term of the batch, not a constant; the
  // seed's 1 folded away, so the whole backward pass is one kernel.
  auto dx = tj::grad(tj::sum(m * m), {x})[0];
  CHECK(ir(g, {dx}) == golden(R"(
b0 = input "x" f32[B,7]
b1 = temp "t1" f32[7]
b2 = temp "t2" f32[B,7]
kernel k0 over [B,7] mean axes 0
  e0 = load b0[i0*7 + i1] : f32
  store b1[i1] = e0
kernel k1 over [B,7]
  e0 = load b1[i1] : f32
  e1 = add e0, e0 : f32
  e2 = count B : f32
  e3 = div e1, e2 : f32
  store b2[i0*7 + i1] = e3
fetch b2
)"));
  // One program, three batch sizes: the count follows the batch (relative 1e-5).
  for (int64_t batch : {1, 2, 7}) {
    tj::reference::Variables vars;
    auto r = run_both(g, {m, dx}, {{"x", random_array({batch, 7}, 11)}}, vars);
    require_close(r, "mean over the batch at batch " + std::to_string(batch));
  }
}

// Regression (found by the random DAG tests, fixed in 79e3a5e): t has two consumers; its first,
// a, was computed inside e's kernel (a + a read it twice, which then gave it a buffer), and that
// kernel runs after t's other consumer c. Hosting t there let c read t's buffer before anything
// wrote it. t now gets a kernel of its own, before both readers; a is inlined into e's kernel.
TEST_CASE("a shared producer is written before its first reader runs", "[cpu][jit][fusion]") {
  // Its two readers do not depend on each other: one group kernel runs both after it.
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 7});
  auto t = tj::tanh(x);
  auto a = t * 2;
  auto c = t + 1;
  auto e = a + a;
  CHECK(ir(g, {c, e}) == golden(R"(
b0 = input "x" f32[B,7]
b1 = temp "t1" f32[B,7]
b2 = temp "t2" f32[B,7]
b3 = temp "t3" f32[B,7]
kernel k0 over [B,7]
  e0 = load b0[i0*7 + i1] : f32
  e1 = tanh e0 : f32
  store b1[i0*7 + i1] = e1
kernel k1_group of 2 parts
part k1 over [B,7]
  e0 = load b1[i0*7 + i1] : f32
  e1 = const 1 : f32
  e2 = add e0, e1 : f32
  store b2[i0*7 + i1] = e2
part k2 over [B,7]
  e0 = load b1[i0*7 + i1] : f32
  e1 = const 2 : f32
  e2 = mul e0, e1 : f32
  e3 = add e2, e2 : f32
  store b3[i0*7 + i1] = e3
fetch b2 b3
)"));
  tj::reference::Variables vars;
  auto r = run_both(g, {c, e}, {{"x", random_array({7, 7}, 12)}}, vars);
  require_close(r, "shared producer");
}

TEST_CASE("the MLP training step lowers to 5 kernels and 9 library calls", "[jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("image", {kBatch, 784});
  auto labels = tj::input("label", {kBatch}, tj::DType::i32);
  auto h = tj::relu(tj::dense(x, 64, "fc1"));
  h = tj::relu(tj::dense(h, 64, "fc2"));
  auto logits = tj::dense(h, 10, "logits");
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
  auto grads = tj::grad(loss, tj::trainable_variables());
  std::vector<Tensor> fetches{loss};
  fetches.insert(fetches.end(), grads.begin(), grads.end());
  const tj::kir::Program p = lower(g, fetches);
  INFO(tj::kir::to_string(p));
  // Library calls: 3 forward GEMMs (fc1 and fc2 with their bias+ReLU epilogues: the ReLU mask
  // reads the activation, so nothing else needs the pre-activation), one_hot, and 5 backward
  // GEMMs: 3 weight gradients and the 2 data gradients into fc2 and fc1 (the image's is not
  // needed), each reading its transposed operand in place, so no transpose kernel.
  // Kernels, in order (named as lowered, before the epilogues took k0 and k1):
  //   k2  logits bias, then two sibling row reductions in one pass: the log-sum-exp and the
  //       label term sum(onehot * logits); also stores the logits
  //   k3  mean over the batch of log-sum-exp - label term: the loss
  //   k4  logits gradient (exp(logits - lse) - onehot) / B, summed over the batch for the bias
  //       gradient; also stores the [B,10] gradient the two GEMMs read
  //   k5  fc2 ReLU mask, summed over the batch for the bias gradient; stores the masked gradient
  //   k6  fc1 ReLU mask, the same
  CHECK(count_steps(p, tj::kir::Step::Kind::kernel) == 5);
  CHECK(count_steps(p, tj::kir::Step::Kind::library) == 9);
  CHECK(count_steps(p, tj::kir::Step::Kind::copy) == 0);
  int gemms = 0, transposed = 0, reductions = 0, multi_output = 0, epilogues = 0;
  for (const auto& c : p.calls) {
    gemms += c.op == tj::Op::MatMul;
    transposed += c.transpose_a || c.transpose_b;
    epilogues += c.epilogue == tj::kir::Epilogue::bias_relu;
  }
  CHECK(epilogues == 2);
  for (const auto& k : p.kernels) {
    reductions += k.reduce != tj::Op::Constant;
    multi_output += k.outputs.size() > 1;
  }
  CHECK(gemms == 8);
  CHECK(transposed == 5);
  CHECK(reductions == 5);
  CHECK(multi_output == 4);
  for (const auto& k : p.kernels) CHECK(k.name.find("transpose") == std::string::npos);
}

namespace {

// A 3-layer MLP's training step with `opt`'s apply: 6 variables (3 kernels, 3 biases).
struct MlpStep {
  tj::Graph g;
  Tensor loss;
  tj::kir::Program program;
  explicit MlpStep(const tj::Optimizer& opt) {
    tj::GraphScope use(g);
    auto x = tj::input("image", {kBatch, 784});
    auto labels = tj::input("label", {kBatch}, tj::DType::i32);
    auto h = tj::relu(tj::dense(x, 64, "fc1"));
    h = tj::relu(tj::dense(h, 64, "fc2"));
    loss = tj::mean(tj::softmax_cross_entropy(tj::dense(h, 10, "logits"), labels));
    auto vars = tj::trainable_variables();
    opt.apply(tj::grad(loss, vars), vars);
    program = tj::lower_graph(g, {loss.id()}, g.update_ops).program;
  }
  // Kernel steps, and what they were before grouping (each part its own launch).
  int kernels() const { return count_steps(program, tj::kir::Step::Kind::kernel); }
  int ungrouped() const {
    int n = 0;
    for (const auto& k : program.kernels) n += static_cast<int>(k.bodies().size());
    return n;
  }
  int largest_group() const {
    size_t n = 0;
    for (const auto& k : program.kernels) n = std::max(n, k.parts.size());
    return static_cast<int>(n);
  }
};

}  // namespace

TEST_CASE("an SGD-momentum apply over 6 variables is one kernel", "[jit][fusion]") {
  // Lowered, the apply is 12 kernels (each variable's momentum, then its weight) and the step
  // counter. Each weight kernel reads its new momentum at the point it writes, so it joins the
  // momentum's kernel; the six are independent and run as one group over their 54,874 points.
  // The step counter reads nothing the rest writes and joins the first group it reaches: with
  // the hidden layers' bias+ReLU kernels gone into their products' epilogues, the apply's.
  MlpStep step(tj::momentum(0.1, 0.9));
  INFO(tj::kir::to_string(step.program));
  CHECK(step.kernels() == 6);  // 5 for the forward and backward pass (as below), 1 apply
  const tj::kir::Step& last = step.program.steps.back();
  REQUIRE(last.kind == tj::kir::Step::Kind::kernel);
  const tj::kir::Kernel& apply = step.program.kernels[last.index];
  REQUIRE(apply.parts.size() == 7);
  CHECK(apply.parts[0].space.rank() == 0);  // the step counter
  for (size_t i = 1; i < apply.parts.size(); ++i) {
    CHECK(apply.parts[i].space.rank() == 1);    // coalesced: one counted loop per variable
    CHECK(apply.parts[i].outputs.size() == 2);  // the momentum and the weight, both in place
  }
  CHECK(tj::kir::segment_starts(apply).back() == tj::kir::Affine{1 + 784 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10, 0});
}

TEST_CASE("an Adam apply over 6 variables is one kernel of 6 parts", "[jit][fusion]") {
  // m, v and the weight of a variable: one part; 19 kernels of the apply become 1. The step
  // counter and the bias corrections (which read it, and which the parts read) are two scalar
  // kernels before it: they grouped with the hidden layers' bias+ReLU kernels until those became
  // their products' epilogues, and no other elementwise kernel precedes the apply.
  MlpStep step(tj::adam(0.01));
  INFO(tj::kir::to_string(step.program));
  CHECK(step.kernels() == 8);  // 5 for the forward and backward pass, 2 scalar, 1 apply
  CHECK(step.largest_group() == 6);
  const tj::kir::Kernel& apply = step.program.kernels[step.program.steps.back().index];
  REQUIRE(apply.parts.size() == 6);
  for (const auto& part : apply.parts) CHECK(part.outputs.size() == 3);
}

TEST_CASE("a grouped momentum apply reads as one kernel of parts", "[jit][fusion]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto w = tj::variable("w", {3, 5}), b = tj::variable("b", {7});
  auto gw = tj::input("gw", {3, 5}), gb = tj::input("gb", {7});
  tj::momentum(0.1, 0.9).apply({gw, gb}, {w, b});
  const tj::kir::Program p = tj::lower_graph(g, {}, g.update_ops).program;
  // Each weight's kernel reads its new momentum where it writes: one part per variable, the
  // [3,5] loop coalesced into 15 points; the step counter is a third, independent part.
  CHECK(ir_text(p) == golden(R"(
b0 = variable "w" f32[3,5]
b1 = variable "b" f32[7]
b2 = input "gw" f32[3,5]
b3 = input "gb" f32[7]
b4 = variable "global_step" f32[]
b5 = variable "w/momentum" f32[3,5]
b6 = variable "b/momentum" f32[7]
kernel k0_group of 3 parts
part k0 over []
  e0 = load b4[0] : f32
  e1 = const 1 : f32
  e2 = add e0, e1 : f32
  store b4[0] = e2
part k1 over [15]
  e0 = const 0.9 : f32
  e1 = load b5[i0] : f32
  e2 = mul e0, e1 : f32
  e3 = load b2[i0] : f32
  e4 = add e2, e3 : f32
  e5 = load b0[i0] : f32
  e6 = const 0.1 : f32
  e7 = mul e6, e4 : f32
  e8 = sub e5, e7 : f32
  store b5[i0] = e4
  store b0[i0] = e8
part k3 over [7]
  e0 = const 0.9 : f32
  e1 = load b6[i0] : f32
  e2 = mul e0, e1 : f32
  e3 = load b3[i0] : f32
  e4 = add e2, e3 : f32
  e5 = load b1[i0] : f32
  e6 = const 0.1 : f32
  e7 = mul e6, e4 : f32
  e8 = sub e5, e7 : f32
  store b6[i0] = e4
  store b1[i0] = e8
fetch
)"));
}

TEST_CASE("a kernel reads at most FusionLimits::max_reads buffers, and past that producers get buffers",
          "[cpu][jit][fusion]") {
  // x0 + x1 + ... + x39, left to right: one chain of 39 adds that would read 40 inputs.
  tj::Graph g;
  tj::GraphScope use(g);
  tj::reference::Feeds feeds;
  const std::vector<Tensor> xs = fed_inputs(40, feeds, 100);
  Tensor sum = xs[0];
  for (int i = 1; i < 40; ++i) sum = sum + xs[i];
  const tj::kir::Program p = lower(g, {sum});
  REQUIRE(p.kernels.size() == 2);  // the first 32 inputs' partial sum, then the rest
  for (const auto& k : p.kernels) {
    std::set<int> loaded;
    for (const auto& e : k.exprs)
      if (e.kind == tj::kir::Expr::Kind::load) loaded.insert(k.accesses[e.access].buffer);
    CHECK(static_cast<int>(loaded.size()) <= tj::FusionLimits().max_reads);
  }
  tj::reference::Variables vars;
  require_close(run_both(g, {sum}, feeds, vars), "a sum of 40 inputs");
}

TEST_CASE("register pressure past FusionLimits::max_registers gives the neediest input a buffer",
          "[cpu][jit][fusion]") {
  // A balanced tree of 8 sums: ((x0+x1)+(x2+x3)) + ((x4+x5)+(x6+x7)) needs 4 registers
  // (Sethi-Ullman), a chain of the same adds only 2.
  tj::Graph g;
  tj::GraphScope use(g);
  tj::reference::Feeds feeds;
  std::vector<Tensor> level = fed_inputs(8, feeds, 200);
  while (level.size() > 1) {
    std::vector<Tensor> next;
    for (size_t i = 0; i < level.size(); i += 2) next.push_back(level[i] + level[i + 1]);
    level = next;
  }
  auto kernels = [&](int max_registers) {
    tj::FusionLimits limits;
    limits.max_registers = max_registers;
    return tj::lower_to_kernels(g, {level[0].id()}, {}, limits).kernels.size();
  };
  CHECK(kernels(4) == 1);
  CHECK(kernels(3) == 2);  // one half of the tree computed into a buffer first
  tj::reference::Variables vars;
  require_close(run_both(g, {level[0]}, feeds, vars), "a balanced sum of 8 inputs");
}

TEST_CASE("fusion: a dropout mask is drawn by each kernel that reads it, not stored", "[cpu][jit]") {
  // The forward's product and the backward's read the mask: each draws it (Philox: a function of
  // the seed, the step and the index), and no kernel stores it for them. Its values against the
  // reference: tests/jit/graph_cases.h, dropout_drawn_by_each_reader.
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 24});
  auto w = tj::input("w", {kBatch, 24});
  auto d = tj::dropout(x, 0.5, /*training=*/true, 7);
  auto dx = tj::grad(tj::sum(d * w), {x})[0];
  const tj::kir::Program p = lower(g, {d, dx});
  INFO(tj::kir::to_string(p));
  int drawing = 0;
  for (const tj::kir::Kernel& k : p.kernels)
    for (const tj::kir::Kernel* body : k.bodies())
      drawing += std::any_of(body->exprs.begin(), body->exprs.end(),
                             [](const tj::kir::Expr& e) { return e.kind == tj::kir::Expr::Kind::random; });
  CHECK(drawing == 2);
  CHECK(p.buffers.size() == 4);  // x, w, and the two fetches: no mask
}
