// The first updates of Adam and Adagrad against PyTorch's closed forms in long double, to the
// rounding each backend makes (the CPU JIT in f32, the reference interpreter in double), not
// to a tolerance that passes: these are where PyTorch computes in double (Adam's bias
// corrections, Adagrad's initial accumulator) and an f32 shortcut shows.
//
// The problem: loss = sum(w * g) with g fed, so the gradient is g exactly, and w starts at 0.
// Each step is checked from the backend's own state before it (w, slots), so the bound is the
// rounding of one step; with g of one sign per element nothing below cancels.
#include "optim_util.h"

namespace {

using namespace optim_test;
using LD = long double;

const std::vector<double> kGrads = {0.3, -1.7, 2.5e-3, 40, -1e-4, 7.25};  // each f32-exact below

struct Problem {
  tj::Graph graph;
  tj::Tensor loss;
  tj::reference::Feeds feeds;
  explicit Problem(const tj::Optimizer& opt) {
    tj::GraphScope use(graph);
    auto w = tj::variable("w", {6}, {.init = tj::init::zeros()});
    auto g = tj::input("g", {6});
    loss = tj::sum(w * g);
    opt.apply(tj::grad(loss, {w}), {w});
    tj::reference::Array ga({6});
    for (size_t i = 0; i < kGrads.size(); ++i) ga[i] = static_cast<float>(kGrads[i]);
    feeds["g"] = ga;
  }
  double g(size_t i) const { return feeds.at("g")[i]; }
};

// 1 - beta^t in long double, without cancellation (beta - 1 is exact for beta >= 0.5).
LD one_minus_power(double beta, int t) { return -std::expm1(t * std::log1p(LD(beta) - 1)); }

// Runs `steps` steps of `p` on the reference interpreter and the CPU JIT; before each, hands
// check(k, side's unit roundoff, state before, state after) for each backend.
template <class Check>
void each_step(Problem& p, int steps, Check check) {
  tj::reference::Variables ref = tj::reference::initialize_variables(p.graph, 1);
  tj::HostVariables host;
  for (const auto& [name, a] : ref) host[name] = to_host(a);
  tj::HostFeeds host_feeds{{"g", to_host(p.feeds.at("g"))}};
  tj::CpuProgram program(p.graph, {p.loss}, /*run_update_ops=*/true);
  for (int k = 0; k < steps; ++k) {
    const State ref_before = to_state(ref), jit_before = to_state(host);
    tj::reference::run(p.graph, {p.loss}, p.feeds, ref, {.step = uint64_t(k), .run_update_ops = true});
    program.run(host_feeds, host, k);
    check(k, std::ldexp(1.0, -53), ref_before, to_state(ref), "reference interpreter");
    check(k, std::ldexp(1.0, -24), jit_before, to_state(host), "CPU JIT");
  }
}

}  // namespace

// torch.optim.Adam, update t: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// w -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps), bc = 1 - beta^t in double. Rounding bound
// in units u of the backend's roundoff, first order, every sum of one sign: m 3u (b1 and 1 - b1
// rounded, two products, the sum), v 4u (g^2 too), sqrt(v) 3u, bc1 and bc2 10u each (see
// tests/jit/graph_cases.h), sqrt(bc2) 6u, their quotient 10u, + eps 11u, lr / bc1 12u (lr
// rounded), times m 16u, over the denominator 28u; then w - d rounds w's new value, u |w'|.
// The old f32 bias correction (1 - pow(0.999f, t)) was 1.3e-5 small, which made d 6.8e-6
// (113u) small at update 1 and 1.0e-5 at update 2.
TEST_CASE("adam's first updates match PyTorch's double bias correction to f32 rounding", "[optim]") {
  const double lr = 0.05, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  Problem p(tj::adam(lr));
  each_step(p, 3, [&](int k, double u, const State& before, const State& after, const char* what) {
    const int t = k + 1;
    const LD bc1 = one_minus_power(b1, t), bc2 = one_minus_power(b2, t);
    for (size_t i = 0; i < kGrads.size(); ++i) {
      const LD g = p.g(i), w = before.at("w")[i];
      const LD m = b1 * LD(before.at("w/adam_m")[i]) + (1 - LD(b1)) * g;
      const LD v = b2 * LD(before.at("w/adam_v")[i]) + (1 - LD(b2)) * g * g;
      const LD d = (lr / bc1) * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
      const LD w1 = after.at("w")[i];
      const LD err = std::abs((w1 - w) + d);  // the update made, against -d
      const LD bound = 28 * u * std::abs(d) + u * std::abs(w1);
      INFO(what << ", update " << t << ", element " << i << ": update " << double(w1 - w)
                << ", PyTorch's " << double(-d) << ", error " << double(err / std::abs(d))
                << " relative, bound " << double(bound / std::abs(d)));
      CHECK(err <= bound);
    }
  });
}

// torch.optim.Adagrad starts its sum at initial_accumulator_value in the parameter's dtype:
// in float64, 0.1 is the double 0.1. The reference interpreter (double) does the same; f32
// storage rounds it once, to float(0.1).
TEST_CASE("adagrad's initial accumulator keeps the user's precision", "[optim]") {
  const double lr = 0.1, acc0 = 0.1, eps = 1e-10;
  Problem p(tj::adagrad(lr, {.initial_accumulator = acc0}));
  const tj::reference::Variables ref = tj::reference::initialize_variables(p.graph, 1);
  for (double x : ref.at("w/adagrad_sum").data) CHECK(x == 0.1);
  for (float x : tj::sample(tj::init::constant(acc0), {6}, 1, 2)) CHECK(x == 0.1f);
  // One step from w = 0: w' = -lr g / (sqrt(sum + g^2) + eps), the sum starting at 0.1 in the
  // reference and at float(0.1) on the JIT. Rounding in units u of the backend's roundoff:
  // g^2 and the sum 2u, sqrt 2u, + eps 3u (eps rounded), g / denominator 4u, times lr 5u, lr
  // rounded 6u. Started from 0.10000000149 the reference was off by up to 7.5e-9 (7e7 u).
  each_step(p, 1, [&](int, double u, const State& before, const State& after, const char* what) {
    for (size_t i = 0; i < kGrads.size(); ++i) {
      const LD g = p.g(i), sum = u == std::ldexp(1.0, -24) ? double(float(acc0)) : acc0;
      CHECK(before.at("w/adagrad_sum")[i] == sum);
      const LD want = -lr * g / (std::sqrt(sum + g * g) + eps);
      const LD got = after.at("w")[i];
      INFO(what << ", element " << i << ": got " << double(got) << ", want " << double(want)
                << ", relative error " << double(std::abs(got - want) / std::abs(want)));
      CHECK(std::abs(got - want) <= 6 * u * std::abs(want));
    }
  });
}
