// Schedules at chosen steps against TensorFlow's formulas (in double), through the reference
// interpreter and the CPU JIT, and the global step's bookkeeping.
#include <numbers>

#include "optim_util.h"

namespace {

using namespace optim_test;

struct Case {
  std::string name;
  tj::Schedule schedule;
  std::function<double(double)> tf;  // the TF definition
};

// Every case evaluated at every step, fed as the f32 scalar input "step".
void check_schedules(const std::vector<Case>& cases, const std::vector<double>& steps) {
  tj::Graph g;
  tj::GraphScope use(g);
  tj::Tensor step = tj::input("step", {});
  std::vector<tj::Tensor> fetches;
  for (const Case& c : cases) fetches.push_back(c.schedule.at(step));
  tj::CpuProgram program(g, fetches);
  for (double s : steps) {
    tj::reference::Variables none;
    tj::HostVariables host_none;
    const tj::reference::Feeds feeds{{"step", tj::reference::Array({}, {s})}};
    const auto ref = tj::reference::run(g, fetches, feeds, none);
    const auto jit = program.run({{"step", to_host(feeds.at("step"))}}, host_none);
    for (size_t i = 0; i < cases.size(); ++i) {
      const double want = cases[i].tf(s);
      INFO(cases[i].name << " = " << cases[i].schedule.str() << " at step " << s << ": TF "
                         << want << ", reference " << ref[i].item() << ", CPU JIT "
                         << jit[i].f32[0]);
      // Relative, with a floor for cosine's zero at the end (f32 cannot be relative there).
      CHECK(std::abs(ref[i].item() - want) <= 1e-12 * std::max(std::abs(want), 1e-3));
      CHECK(std::abs(jit[i].f32[0] - want) <= 2e-6 * std::max(std::abs(want), 0.1));
    }
  }
}

}  // namespace

TEST_CASE("schedules follow TensorFlow's definitions", "[optim]") {
  const double pi = std::numbers::pi;
  auto tf_exp = [](double s) { return 0.1 * std::pow(0.96, s / 7); };
  std::vector<Case> cases = {
      {"constant", 0.25f, [](double) { return double(0.25f); }},
      {"constant_schedule", tj::constant_schedule(0.5), [](double) { return 0.5; }},
      {"exponential", tj::exponential_decay(0.1, 7, 0.96), tf_exp},
      {"staircase", tj::exponential_decay(0.1, 7, 0.96, true),
       [](double s) { return 0.1 * std::pow(0.96, std::floor(s / 7)); }},
      {"piecewise", tj::piecewise_constant({10, 20, 35}, {1.0, 0.5, 0.1, 0.01}),
       [](double s) { return s <= 10 ? 1.0 : s <= 20 ? 0.5 : s <= 35 ? 0.1 : 0.01; }},
      {"cosine", tj::cosine_decay(0.3, 37, 0.1),
       [pi](double s) {
         const double c = 0.5 * (1 + std::cos(pi * std::min(s, 37.0) / 37));
         return 0.3 * ((1 - 0.1) * c + 0.1);
       }},
      {"cosine alpha 0", tj::cosine_decay(0.3, 40),
       [pi](double s) { return 0.3 * 0.5 * (1 + std::cos(pi * std::min(s, 40.0) / 40)); }},
      {"warmup", tj::linear_warmup(tj::exponential_decay(0.1, 7, 0.96), 5),
       [tf_exp](double s) { return tf_exp(s) * std::min(1.0, (s + 1) / 5); }},
  };
  // At and on both sides of every boundary, and far past the last.
  check_schedules(cases, {0, 1, 3, 4, 5, 6, 7, 8, 10, 11, 13, 14, 20, 21, 35, 36, 37, 39, 40,
                          41, 100, 1000, 123456});
}

TEST_CASE("the global step is one f32 scalar per graph, made once", "[optim]") {
  tj::Graph g;
  tj::GraphScope use(g);
  tj::Tensor a = tj::global_step();
  tj::VariableScope tower("tower1");
  tj::Tensor b = tj::global_step();  // not "tower1/global_step"
  CHECK(a.id() == b.id());
  const tj::VariableInfo* info = g.find_variable("global_step");
  REQUIRE(info != nullptr);
  CHECK(info->shape == tj::Shape{});
  CHECK(info->dtype == tj::DType::f32);
  CHECK_FALSE(info->trainable);
  CHECK(tj::trainable_variables().empty());
}

TEST_CASE("the global step advances by one per step however many applies a graph holds",
          "[optim]") {
  Quadratic q;
  {
    tj::GraphScope use(q.graph);
    // Two applies on disjoint variables (as one per variable group) and an explicit increment.
    auto first = tj::sgd(0.1).apply({q.grads[0]}, {q.vars[0]});
    auto second = tj::momentum(0.1, 0.9).apply({q.grads[1]}, {q.vars[1]});
    CHECK(first.size() == 2);   // the weight and the global step
    CHECK(second.size() == 2);  // the momentum and the weight; the step was already there
    tj::increment_global_step();
  }
  int increments = 0;
  for (int id : q.graph.update_ops)
    increments += q.graph.node(q.graph.node(id).inputs[0]).attrs.name == "global_step";
  CHECK(increments == 1);
  run_steps(q.graph, q.loss, q.feeds, 4, [](int k, const State& ref, const State& jit) {
    CHECK(ref.at("global_step")[0] == k + 1);
    CHECK(jit.at("global_step")[0] == k + 1);
  });
}
