// Each optimiser, a few steps on the quadratic of optim_util.h, against torch_reference.h:
// the reference interpreter within 1e-9 relative; every CPU JIT step within its float32 error
// bounds of the reference run from the JIT's own state (run_steps).
#include "torch_reference.h"

namespace {

using namespace optim_test;
using K = tj::OptimizerKind;

constexpr int kSteps = 5;

// A constant learning rate for the torch reference (its default is 0.1).
std::function<double(double)> fixed(double lr) {
  return [lr](double) { return lr; };
}

// Builds `opt`'s apply on a fresh quadratic and checks both backends against `config` after
// every step: weights, every slot and the global step.
void check_optimizer(const tj::Optimizer& opt, TorchConfig config, const std::string& what) {
  Quadratic q;
  {
    tj::GraphScope use(q.graph);
    opt.apply(q.grads, q.vars);
  }
  State expected = to_state(tj::reference::initialize_variables(q.graph, 1));
  run_steps(q.graph, q.loss, q.feeds, kSteps, [&](int k, const State& ref, const State&) {
    torch_step(config, q, expected);
    const std::string at = what + " after step " + std::to_string(k + 1);
    REQUIRE(ref.size() == expected.size());  // no slot the reference does not know
    require_state(ref, expected, 1e-9, 1e-6, at + " (reference interpreter)");
  });
}

}  // namespace

TEST_CASE("sgd matches torch.optim.SGD", "[optim]") {
  check_optimizer(tj::sgd(0.1), {.kind = K::sgd}, "sgd");
  check_optimizer(tj::sgd(0.1, {.weight_decay = 0.05}), {.kind = K::sgd, .weight_decay = 0.05},
                  "sgd with weight decay");
}

TEST_CASE("momentum and nesterov match torch.optim.SGD with momentum", "[optim]") {
  check_optimizer(tj::momentum(0.1, 0.9), {.kind = K::momentum, .momentum = 0.9}, "momentum");
  check_optimizer(tj::momentum(0.1, 0.8, {.nesterov = true, .weight_decay = 0.01}),
                  {.kind = K::momentum, .momentum = 0.8, .nesterov = true, .weight_decay = 0.01},
                  "nesterov with weight decay");
}

TEST_CASE("momentum reads its learning rate schedule at the step before the update", "[optim]") {
  // lr at update k (k = 0, 1, ...) is 0.2 * 0.5^(k / 2): the global step before the increment.
  check_optimizer(tj::momentum(tj::exponential_decay(0.2, 2, 0.5), 0.9),
                  {.kind = K::momentum, .lr = [](double s) { return 0.2 * std::pow(0.5, s / 2); },
                   .momentum = 0.9},
                  "momentum with exponential decay");
}

TEST_CASE("adam matches torch.optim.Adam with bias correction", "[optim]") {
  check_optimizer(tj::adam(0.05), {.kind = K::adam, .lr = fixed(0.05)}, "adam");
  check_optimizer(tj::adam(0.05, {.beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1}),
                  {.kind = K::adam, .lr = fixed(0.05), .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1},
                  "adam with L2 weight decay");
}

TEST_CASE("adamw decouples weight decay as torch.optim.AdamW", "[optim]") {
  check_optimizer(tj::adamw(0.05), {.kind = K::adamw, .lr = fixed(0.05), .weight_decay = 0.01}, "adamw default");
  check_optimizer(tj::adamw(0.05, {.weight_decay = 0.5}), {.kind = K::adamw, .lr = fixed(0.05), .weight_decay = 0.5},
                  "adamw strong decay");
}

TEST_CASE("rmsprop matches torch.optim.RMSprop", "[optim]") {
  check_optimizer(tj::rmsprop(0.01), {.kind = K::rmsprop, .lr = fixed(0.01)}, "rmsprop");
  check_optimizer(tj::rmsprop(0.01, {.alpha = 0.9, .momentum = 0.5, .centered = true,
                                     .weight_decay = 0.02}),
                  {.kind = K::rmsprop, .lr = fixed(0.01), .momentum = 0.5, .alpha = 0.9, .centered = true,
                   .weight_decay = 0.02},
                  "rmsprop centered with momentum and weight decay");
}

TEST_CASE("adagrad matches torch.optim.Adagrad", "[optim]") {
  check_optimizer(tj::adagrad(0.1), {.kind = K::adagrad, .eps = 1e-10}, "adagrad");
  check_optimizer(tj::adagrad(0.1, {.lr_decay = 0.1, .initial_accumulator = 0.5,
                                    .weight_decay = 0.01}),
                  {.kind = K::adagrad, .eps = 1e-10, .lr_decay = 0.1, .initial_accumulator = 0.5,
                   .weight_decay = 0.01},
                  "adagrad with lr decay, initial accumulator and weight decay");
}

TEST_CASE("clipping by global norm scales every gradient by one factor", "[optim]") {
  // The quadratic's gradient norm is a few units: 0.5 clips it, 1000 leaves it alone.
  check_optimizer(tj::sgd(0.1).with_clip_by_global_norm(0.5),
                  {.kind = K::sgd, .clip_norm = 0.5}, "sgd clipped");
  check_optimizer(tj::momentum(0.1, 0.9).with_clip_by_global_norm(1000),
                  {.kind = K::momentum, .momentum = 0.9, .clip_norm = 1000}, "momentum unclipped");
  check_optimizer(tj::adam(0.05).with_clip_by_global_norm(0.3).with_weight_decay(0.1),
                  {.kind = K::adam, .lr = fixed(0.05), .weight_decay = 0.1, .clip_norm = 0.3},
                  "adam clipped, then L2 decay");
}

TEST_CASE("slot variables are named after their variable and are not trainable", "[optim]") {
  Quadratic q;
  tj::GraphScope use(q.graph);
  tj::VariableScope tower("tower1");  // the scope apply() runs in does not prefix slot names
  auto ops = tj::adam(0.1).apply(q.grads, q.vars);
  CHECK(ops.size() == 3 * q.vars.size() + 1);  // m, v, weight per variable, then the step
  for (const char* name : {"fc1/kernel/adam_m", "fc1/kernel/adam_v", "fc1/bias/adam_m",
                           "fc1/bias/adam_v", "global_step"}) {
    INFO(name);
    const tj::VariableInfo* info = q.graph.find_variable(name);
    REQUIRE(info != nullptr);
    CHECK_FALSE(info->trainable);
  }
  CHECK(tj::trainable_variables().size() == 2);
  CHECK(tj::adam(0.1).str() == "adam(lr=0.1, betas=(0.9, 0.999), eps=1e-08)");
}
