// EMA of the trainable variables after an SGD apply, against TF's ExponentialMovingAverage
// formula (with and without the num_updates clamp), and evaluating with the EMA weights.
#include "optim_util.h"

namespace {

using namespace optim_test;

// Trains the quadratic with SGD (lr 0.1) and an EMA for `steps` steps and checks the shadows
// against the formula run on the reference interpreter's own weights (1e-9) after every step;
// every CPU JIT step within its error bounds (run_steps).
void check_ema(double decay, bool num_updates, int steps) {
  Quadratic q;
  {
    tj::GraphScope use(q.graph);
    tj::sgd(0.1).apply(q.grads, q.vars);
    auto ops = tj::ExponentialMovingAverage{.decay = decay, .num_updates = num_updates}.apply();
    CHECK(ops.size() == q.vars.size());
  }
  // Shadows start as copies of their variables.
  const State initial = to_state(tj::reference::initialize_variables(q.graph, 1));
  for (size_t i = 0; i < q.vars.size(); ++i)
    CHECK(initial.at(q.name(i) + "/ema") == initial.at(q.name(i)));
  State expected = initial;
  run_steps(q.graph, q.loss, q.feeds, steps, [&](int k, const State& ref, const State&) {
    const double n = k + 1;  // the global step after this step's increment
    const double d = num_updates ? std::min(decay, (1 + n) / (10 + n)) : decay;
    for (size_t i = 0; i < q.vars.size(); ++i) {
      std::vector<double>& w = expected.at(q.name(i));
      std::vector<double>& shadow = expected.at(q.name(i) + "/ema");
      for (size_t j = 0; j < w.size(); ++j) {
        w[j] -= 0.1 * (q.a(i)[j] * w[j] + q.b(i)[j]);
        shadow[j] -= (1 - d) * (shadow[j] - w[j]);  // the weight after this step's update
      }
    }
    expected.at("global_step")[0] = n;
    const std::string at = "after step " + std::to_string(k + 1) + ", decay " +
                           std::to_string(d);
    require_state(ref, expected, 1e-9, 1e-6, at + " (reference interpreter)");
  });
}

}  // namespace

TEST_CASE("ema follows TF's formula with the num_updates clamp", "[optim]") {
  // decay 0.9 against (1 + n) / (10 + n): the clamp rules for n < 80, then 0.9.
  check_ema(0.9, true, 12);
  // The seed's 0.9999: the clamp rules throughout.
  check_ema(0.9999, true, 6);
}

TEST_CASE("ema without num_updates uses the decay as given", "[optim]") {
  check_ema(0.7, false, 6);
}

TEST_CASE("evaluation swaps in the shadow weights by name", "[optim]") {
  Quadratic q;
  tj::GraphScope use(q.graph);
  tj::adam(0.1).apply(q.grads, q.vars);
  tj::ExponentialMovingAverage{}.apply();
  const auto names = tj::ema_names(q.graph);
  CHECK(names == std::map<std::string, std::string>{{"fc1/bias", "fc1/bias/ema"},
                                                   {"fc1/kernel", "fc1/kernel/ema"}});
  tj::reference::Variables vars = tj::reference::initialize_variables(q.graph, 1);
  for (int k = 0; k < 3; ++k)
    tj::reference::run(q.graph, {q.loss}, q.feeds, vars, {.run_update_ops = true});
  const tj::reference::Variables eval = tj::with_ema_weights(vars, q.graph);
  CHECK(eval.at("fc1/kernel").data == vars.at("fc1/kernel/ema").data);
  CHECK(eval.at("fc1/bias").data == vars.at("fc1/bias/ema").data);
  CHECK(eval.at("fc1/kernel").data != vars.at("fc1/kernel").data);
  CHECK(eval.at("fc1/kernel/adam_m").data == vars.at("fc1/kernel/adam_m").data);
  // The same works on the CPU runtime's variables.
  tj::HostVariables host;
  for (const auto& [name, a] : vars) host[name] = to_host(a);
  CHECK(tj::with_ema_weights(host, q.graph).at("fc1/bias").f32 == host.at("fc1/bias/ema").f32);
}
