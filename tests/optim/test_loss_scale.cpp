// Dynamic loss scaling (dsl/loss_scale.h) against GradScaler's rules, written out here step
// by step: overflows injected at known steps are skipped (the weights and slots unchanged, the
// scale backed off), finite steps apply the unscaled gradient exactly, the scale grows after
// the interval; and under an f16 policy it keeps gradients that f16 would flush to zero.
#include "jit/passes/half_matmuls.h"
#include "optim_util.h"

namespace {

using namespace optim_test;
using Catch::Contains;

// Every value is a short binary fraction, so every finite step is exact in f32 and double:
// w' = w - 0.5 g k, the gradient scaled by a power of two and back.
const std::vector<double> kGrads = {0.25, -1.5, 3, -0.125, 2, 0.75, -4};

// The gradient's multiplier at each step (loss = sum(w * g * k), so dloss/dw = g k): 1, or an
// infinity or a NaN in one element, where a scaled backward pass would have overflowed.
std::vector<double> multiplier(int step) {
  std::vector<double> k(kGrads.size(), 1.0);
  if (step == 3) k[2] = INFINITY;
  if (step == 5) k[0] = NAN;
  return k;
}

struct Reference {  // GradScaler's update, from its documentation
  double scale, growth, backoff;
  int64_t interval, good = 0, skipped = 0;
  bool step(bool finite) {
    if (!finite) {
      scale *= backoff, good = 0, ++skipped;
      return false;
    }
    if (++good == interval) scale *= growth, good = 0;
    return true;
  }
};

tj::reference::Array array(const std::vector<double>& v) {
  tj::reference::Array a({static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) a[i] = v[i];
  return a;
}

}  // namespace

TEST_CASE("loss scaling skips overflowed steps and grows and backs off as GradScaler does", "[optim]") {
  const tj::DynamicLossScale rules{.initial = 8, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3};
  const auto opt = tj::momentum(0.5, 0.5).with_loss_scale(rules);
  tj::Graph graph;
  tj::Tensor loss;
  {
    tj::GraphScope use(graph);
    auto w = tj::variable("w", {7}, {.init = tj::init::zeros()});
    loss = tj::sum(w * tj::input("g", {7}) * tj::input("k", {7}));
    opt.apply(tj::grad(opt.scale_loss(loss), {w}), {w});
  }
  tj::reference::Variables ref = tj::reference::initialize_variables(graph, 1);
  tj::HostVariables jit;
  for (const auto& [name, a] : ref) jit[name] = to_host(a);
  tj::CpuProgram program(graph, {loss}, /*run_update_ops=*/true);

  Reference expect{rules.initial, rules.growth_factor, rules.backoff_factor, rules.growth_interval};
  std::vector<double> w(kGrads.size(), 0.0), buf(kGrads.size(), 0.0);
  for (int step = 0; step < 10; ++step) {
    const std::vector<double> k = multiplier(step);
    bool finite = true;
    for (size_t i = 0; i < k.size(); ++i) finite = finite && std::isfinite(kGrads[i] * k[i]);
    if (expect.step(finite))
      for (size_t i = 0; i < w.size(); ++i) {  // torch.optim.SGD with momentum, exact here
        buf[i] = 0.5 * buf[i] + kGrads[i] * k[i];
        w[i] -= 0.5 * buf[i];
      }
    const tj::reference::Feeds feeds{{"g", array(kGrads)}, {"k", array(k)}};
    tj::reference::run(graph, {loss}, feeds, ref, {.step = uint64_t(step), .run_update_ops = true});
    program.run({{"g", to_host(feeds.at("g"))}, {"k", to_host(feeds.at("k"))}}, jit, step);
    for (const auto& [state, what] : {std::pair{to_state(ref), "reference"}, std::pair{to_state(jit), "CPU JIT"}}) {
      INFO(what << ", after step " << step << (finite ? "" : " (overflowed)"));
      CHECK(state.at("w") == w);  // bitwise: every finite step is exact
      CHECK(state.at("w/momentum") == buf);
      CHECK(state.at(tj::DynamicLossScale::kScale)[0] == expect.scale);
      CHECK(state.at(tj::DynamicLossScale::kGoodSteps)[0] == static_cast<double>(expect.good));
      CHECK(state.at(tj::DynamicLossScale::kSkippedSteps)[0] == static_cast<double>(expect.skipped));
      CHECK(state.at("global_step")[0] == step + 1);  // skipped steps count, as TF's do
    }
  }
  CHECK(expect.skipped == 2);
  CHECK(expect.scale == 8);  // 8 -> 16 (step 2) -> 8 (step 3) -> 4 (step 5) -> 8 (step 8)
}

// loss = c sum(x w) with c = 2^-30: dloss/d(xw) = c, below f16's smallest subnormal (2^-24),
// so under an f16 policy the backward product's operand rounds to 0 and w never moves. Scaled
// by 2^16 it is 2^-14, f16's smallest normal: the product is exact, and so is the unscaling.
TEST_CASE("loss scaling keeps f16 gradients that would underflow", "[optim][half]") {
  const double c = std::ldexp(1.0, -30);
  for (const bool scaled : {false, true}) {
    INFO((scaled ? "with" : "without") << " loss scaling");
    const auto opt = scaled ? tj::sgd(1.0).with_loss_scale() : tj::sgd(1.0);
    tj::Graph graph;
    tj::Tensor loss;
    {
      tj::GraphScope use(graph);
      auto w = tj::variable("w", {3, 2}, {.init = tj::init::zeros()});
      loss = tj::sum(tj::matmul(tj::input("x", {tj::kBatch, 3}), w)) * c;
      opt.apply(tj::grad(opt.scale_loss(loss), {w}), {w});
    }
    const tj::ScopedPrecisionPolicy f16(tj::PrecisionPolicy{.matmul_operands = tj::DType::f16});
    tj::CpuProgram program(graph, {loss}, /*run_update_ops=*/true);
    tj::HostVariables vars;
    for (const auto& [name, a] : tj::reference::initialize_variables(graph, 1)) vars[name] = to_host(a);
    tj::HostTensor x(tj::Shape{5, 3}, tj::DType::f32);
    for (int i = 0; i < 15; ++i) x.f32[i] = static_cast<float>(i % 7 - 3);  // f16-exact
    program.run({{"x", x}}, vars, 0);
    for (int i = 0; i < 3; ++i) {
      double column = 0;
      for (int b = 0; b < 5; ++b) column += x.f32[b * 3 + i];
      for (int j = 0; j < 2; ++j) {
        INFO("w[" << i << "][" << j << "], the input column's sum " << column);
        CHECK(vars.at("w").f32[i * 2 + j] == (scaled ? -c * column : 0.0));
      }
    }
  }
}

TEST_CASE("loss scaling's rules out of range are refused", "[optim]") {
  static const std::string here = "tests/optim/test_loss_scale.cpp:";
  Quadratic q;
  tj::GraphScope use(q.graph);
  auto scaled = [](tj::DynamicLossScale s) { return tj::sgd(0.1).with_loss_scale(s); };
  CHECK_THROWS_WITH(scaled({.initial = 0}).apply(q.grads, q.vars),
                    Contains("loss scale: initial is 0 but must be a finite number > 0") && Contains(here));
  CHECK_THROWS_WITH(scaled({.growth_factor = 1}).apply(q.grads, q.vars),
                    Contains("loss scale: growth_factor is 1 but must be > 1") && Contains(here));
  CHECK_THROWS_WITH(scaled({.backoff_factor = 1}).apply(q.grads, q.vars),
                    Contains("loss scale: backoff_factor is 1 but must be in (0, 1)") && Contains(here));
  CHECK_THROWS_WITH(scaled({.growth_interval = 0}).apply(q.grads, q.vars),
                    Contains("loss scale: growth_interval is 0 but must be >= 1") && Contains(here));
}
