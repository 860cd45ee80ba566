// Shared by the optimiser tests: a small problem with a closed-form gradient, runs of N
// training steps through the reference interpreter and the CPU JIT (each JIT step within its
// error bounds), and comparisons that print the variable, element and error on failure.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "jit/reference/interpreter.h"
#include "runtime/cpu/cpu_program.h"
#include "tests/jit/jit_check.h"
#include "towerjit.h"

namespace optim_test {

namespace tj = towerjit;
using State = std::map<std::string, std::vector<double>>;  // variable name -> elements

// loss = sum over variables of sum(0.5 * a * w^2 + b * w), so dloss/dw = a * w + b, with a and
// b fed per variable ("<var>:a", "<var>:b"). Variables at odd sizes: "fc1/kernel" [3,5] and
// "fc1/bias" [7], drawn from U(-1, 1).
struct Quadratic {
  tj::Graph graph;
  std::vector<tj::Tensor> vars, grads;
  tj::Tensor loss;
  tj::reference::Feeds feeds;

  Quadratic() {
    tj::GraphScope use(graph);
    {
      tj::VariableScope scope("fc1");
      vars.push_back(tj::variable("kernel", {3, 5}, {.init = tj::init::uniform(-1, 1)}));
      vars.push_back(tj::variable("bias", {7}, {.init = tj::init::uniform(-1, 1)}));
    }
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> pos(0.5, 2.0), any(-1.0, 1.0);
    for (const tj::Tensor& v : vars) {
      const std::string name = v.node().attrs.name;
      auto a = tj::input(name + ":a", v.shape()), b = tj::input(name + ":b", v.shape());
      tj::Tensor term = tj::sum(0.5 * a * v * v + b * v);
      loss = loss.valid() ? loss + term : term;
      tj::reference::Array fa(v.shape()), fb(v.shape());
      for (double& x : fa.data) x = static_cast<float>(pos(rng));  // float: both backends agree
      for (double& x : fb.data) x = static_cast<float>(any(rng));
      feeds[name + ":a"] = fa;
      feeds[name + ":b"] = fb;
    }
    grads = tj::grad(loss, vars);
  }
  std::string name(size_t i) const { return vars[i].node().attrs.name; }
  const std::vector<double>& a(size_t i) const { return feeds.at(name(i) + ":a").data; }
  const std::vector<double>& b(size_t i) const { return feeds.at(name(i) + ":b").data; }
};

inline State to_state(const tj::reference::Variables& vars) {
  State s;
  for (const auto& [name, a] : vars) s[name] = a.data;
  return s;
}

inline State to_state(const tj::HostVariables& vars) {
  State s;
  for (const auto& [name, t] : vars) s[name] = std::vector<double>(t.f32.begin(), t.f32.end());
  return s;
}

inline tj::HostTensor to_host(const tj::reference::Array& a) {
  tj::HostTensor t(a.shape, a.dtype);
  for (int64_t i = 0; i < a.size(); ++i) t.f32[i] = static_cast<float>(a[i]);
  return t;
}

// Every entry of `expected` is in `actual` and |actual - expected| <= rtol * max(|expected|,
// floor) element by element.
inline void require_state(const State& actual, const State& expected, double rtol, double floor,
                          const std::string& what) {
  for (const auto& [name, want] : expected) {
    INFO(what << ": variable \"" << name << "\"");
    REQUIRE(actual.count(name) == 1);
    const std::vector<double>& got = actual.at(name);
    REQUIRE(got.size() == want.size());
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double err = std::abs(got[i] - want[i]) / std::max(std::abs(want[i]), floor);
      if (!(err <= worst)) worst = err, at = i;
    }
    INFO("largest relative error " << worst << " at element " << at << " (got " << got[at]
                                   << ", expected " << want[at] << "), tolerance " << rtol);
    CHECK(worst <= rtol);
  }
}

// Runs `steps` training steps through the reference interpreter and the CPU JIT from the
// graph's initial variables (seed 1); after step k calls check(k, reference_state, jit_state).
// Every JIT step is also checked against the reference run from the JIT's own state before
// it: each variable within the float32 error bound of that step (tests/jit/error_bound_check.h).
// Over several steps the two states drift apart by more than one step's bound, so the
// callers compare the reference's state with PyTorch's formulas, and the JIT's step by step.
template <class Check>
void run_steps(const tj::Graph& g, tj::Tensor loss, const tj::reference::Feeds& feeds, int steps,
               Check check) {
  tj::reference::Variables ref = tj::reference::initialize_variables(g, 1);
  tj::HostVariables host;
  for (const auto& [name, a] : ref) host[name] = to_host(a);
  tj::HostFeeds host_feeds;
  for (const auto& [name, a] : feeds) host_feeds[name] = to_host(a);
  tj::CpuProgram program(g, {loss}, /*run_update_ops=*/true);
  for (int k = 0; k < steps; ++k) {
    tj::reference::run(g, {loss}, feeds, ref, {.step = uint64_t(k), .run_update_ops = true});
    tj::reference::Variables from_jit;
    for (const auto& [name, t] : host) from_jit[name] = tj::testing::to_array(t);
    tj::reference::ErrorBounds bounds;
    tj::reference::run(g, {loss}, feeds, from_jit, {.step = uint64_t(k), .run_update_ops = true, .bounds = &bounds});
    program.run(host_feeds, host, k);
    for (const auto& [name, want] : from_jit)
      tj::testing::check_within_bounds(tj::testing::to_array(host.at(name)), want, bounds.variables.at(name),
                                       "step " + std::to_string(k + 1) + ", variable \"" + name + "\" (CPU JIT)");
    check(k, to_state(ref), to_state(host));
  }
}

}  // namespace optim_test
