// Mistakes in building optimisers, schedules and EMA: each is a towerjit::Error that names
// the culprit and the fix.
#include "optim_util.h"

// Where each mistake below is reported: the line of this file that made it (checked as the
// file, the line being the call's).
static const std::string here = "tests/optim/test_optim_errors.cpp:";

using Catch::Contains;
using namespace optim_test;

TEST_CASE("apply rejects mismatched gradients and targets", "[optim]") {
  Quadratic q;
  tj::GraphScope use(q.graph);
  const auto opt = tj::momentum(0.1, 0.9);
  CHECK_THROWS_WITH(opt.apply({q.grads[0]}, q.vars), Contains("1 gradients for 2 variables") && Catch::Contains(here));
  CHECK_THROWS_WITH(opt.apply({tj::Tensor(), q.grads[1]}, q.vars), Contains("\"fc1/kernel\" has no gradient") && Catch::Contains(here));
  CHECK_THROWS_WITH(opt.apply({q.grads[1], q.grads[0]}, q.vars), Contains("the gradient of \"fc1/kernel\" is f32[7]") && Catch::Contains(here));
  CHECK_THROWS_WITH(opt.apply({q.grads[0], q.grads[0]}, {q.vars[0], q.vars[0]}), Contains("listed twice") && Catch::Contains(here));
  CHECK_THROWS_WITH(opt.apply({q.grads[0]}, {q.vars[0] * 2.0}), Contains("must be an f32 variable") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::momentum(0.1, -1).apply(q.grads, q.vars), Contains("momentum is -1") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::adam(0.1, {.beta2 = 1}).apply(q.grads, q.vars), Contains("beta2 is 1") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::sgd(0.1).with_clip_by_global_norm(-1).apply(q.grads, q.vars), Contains("clip_norm is -1") && Catch::Contains(here));
}

TEST_CASE("schedules reject impossible arguments", "[optim]") {
  CHECK_THROWS_WITH(tj::exponential_decay(0.1, 0, 0.9), Contains("decay_steps must be") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::piecewise_constant({10, 20}, {1, 2}), Contains("2 boundaries need 3 values") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::piecewise_constant({20, 10}, {1, 2, 3}), Contains("boundaries must strictly increase") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::linear_warmup(0.1, -5), Contains("warmup_steps must be") && Catch::Contains(here));
  tj::Graph g;
  tj::GraphScope use(g);
  CHECK_THROWS_WITH(tj::Schedule(0.1).at(tj::input("s", {2})), Contains("an f32 scalar") && Catch::Contains(here));
}

TEST_CASE("a variable that takes a reserved state name is reported", "[optim]") {
  tj::Graph g;
  tj::GraphScope use(g);
  tj::variable("global_step", {2});
  CHECK_THROWS_WITH(tj::global_step(), Contains("\"global_step\" should be f32[]") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::ExponentialMovingAverage{.decay = 1.5}.apply(), Contains("decay is 1.5") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::sample(tj::init::copy_of("w"), {3}, 1, 2), Contains("copy_of(w)") && Catch::Contains(here));
  tj::variable("copy", {3}, {.init = tj::init::copy_of("later")});
  tj::variable("later", {3});
  CHECK_THROWS_WITH(tj::reference::initialize_variables(g, 1), Contains("no variable of that name and shape [3] was declared before it") && Catch::Contains(here));
}
