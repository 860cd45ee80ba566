// Checks grad() against central finite differences through the reference interpreter, which
// computes in double precision: with eps = 1e-6 the difference quotient is accurate to about
// 1e-9, so analytic and numeric gradients must agree to a relative 1e-6. Every check also runs
// the gradients through the CPU JIT and requires them within their float32 error bounds of
// the interpreter's (tests/jit/error_bound_check.h).
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "dsl/autodiff.h"
#include "dsl/ops.h"
#include "jit/reference/interpreter.h"
#include "../jit/jit_check.h"

namespace gradcheck {

using namespace towerjit;
using reference::Array;

inline constexpr double kEps = 1e-6;
// |analytic - numeric| <= kTolerance * max(1, |numeric|): relative, absolute near zero.
inline constexpr double kTolerance = 1e-6;
inline constexpr int64_t kBatchSize = 7;

// Where an input's values are drawn, so each op is checked away from its kinks and poles.
enum class Domain {
  any,             // uniform in [-2, 2]
  positive,        // uniform in [0.5, 2]: log, sqrt, pow's base
  away_from_zero,  // +-[0.2, 2]: relu, abs, a divisor
  labels,          // i32 class indices in [0, classes)
  probabilities,   // positive, each row along the last axis summing to 1
};

struct Arg {
  Shape shape;  // may hold kBatch: bound to kBatchSize
  Domain domain = Domain::any;
  bool wrt = true;       // differentiate w.r.t. it (labels and conditions are not)
  int64_t classes = 0;   // for Domain::labels
};

inline Array draw(const Arg& arg, std::mt19937& rng) {
  const Shape shape = arg.shape.bind(kBatchSize);
  const bool labels = arg.domain == Domain::labels;
  Array a(shape, labels ? DType::i32 : DType::f32);
  std::uniform_real_distribution<double> u(0, 1);
  for (double& v : a.data) {
    switch (arg.domain) {
      case Domain::any: v = -2 + 4 * u(rng); break;
      case Domain::positive: case Domain::probabilities: v = 0.5 + 1.5 * u(rng); break;
      case Domain::away_from_zero: v = (u(rng) < 0.5 ? -1 : 1) * (0.2 + 1.8 * u(rng)); break;
      case Domain::labels: v = std::floor(u(rng) * static_cast<double>(arg.classes)); break;
    }
  }
  if (arg.domain == Domain::probabilities) {
    const int64_t row = shape[shape.rank() - 1];
    for (int64_t start = 0; start < a.size(); start += row) {
      double total = 0;
      for (int64_t i = 0; i < row; ++i) total += a[start + i];
      for (int64_t i = 0; i < row; ++i) a[start + i] /= total;
    }
  }
  // Rounded to float, so the CPU JIT sees the same numbers: a comparison such as max's tie test
  // then decides the same way on both sides.
  for (double& v : a.data) v = static_cast<float>(v);
  return a;
}

// The largest error of one tensor's gradient, for the failure message.
struct Worst {
  double error = 0;
  int64_t element = -1;
  double analytic = 0, numeric = 0;
};

inline void note(Worst& w, int64_t element, double analytic, double numeric) {
  const double error = std::abs(analytic - numeric) / std::max(1.0, std::abs(numeric));
  if (error >= w.error) w = {error, element, analytic, numeric};
}

// Perturbs each element of `value` by +-kEps and returns the worst disagreement between the
// difference quotient of `loss_at()` and `analytic`.
inline Worst compare(Array& value, const Array& analytic, const std::function<double()>& loss_at) {
  REQUIRE(analytic.shape == value.shape);
  Worst worst;
  for (int64_t j = 0; j < value.size(); ++j) {
    const double saved = value[j];
    value[j] = saved + kEps;
    const double up = loss_at();
    value[j] = saved - kEps;
    const double down = loss_at();
    value[j] = saved;
    note(worst, j, analytic[j], (up - down) / (2 * kEps));
  }
  return worst;
}

inline std::string report(const std::string& what, const std::string& tensor, const Shape& shape,
                          const Worst& w) {
  std::ostringstream out;
  out << what << ": gradient of " << tensor << " " << shape.str() << ", largest error "
      << w.error << " (tolerance " << kTolerance << ") at element " << w.element
      << ": analytic " << w.analytic << ", numeric " << w.numeric;
  return out.str();
}

// Builds x_i = input(...) for each arg, y = op(xs) and loss = sum(y * r) with a fixed random
// weight r (so no two elements of y count alike), then checks grad(loss, wrt args) against
// central differences on every element.
inline void check_op(const std::string& what, const std::vector<Arg>& args,
                     const std::function<Tensor(const std::vector<Tensor>&)>& op,
                     unsigned seed = 1234) {
  Graph graph;
  GraphScope scope(graph);
  std::vector<Tensor> xs, wrt;
  std::vector<int> wrt_arg;
  for (size_t i = 0; i < args.size(); ++i) {
    const bool labels = args[i].domain == Domain::labels;
    xs.push_back(input("x" + std::to_string(i), args[i].shape, labels ? DType::i32 : DType::f32));
    if (args[i].wrt) {
      wrt.push_back(xs.back());
      wrt_arg.push_back(static_cast<int>(i));
    }
  }
  const Tensor y = op(xs);
  const Tensor r = input("r", y.shape());
  const Tensor loss = sum(y * r);
  const std::vector<Tensor> grads = grad(loss, wrt);

  std::mt19937 rng(seed);
  reference::Feeds feeds;
  for (size_t i = 0; i < args.size(); ++i) feeds["x" + std::to_string(i)] = draw(args[i], rng);
  feeds["r"] = draw(Arg{y.shape()}, rng);
  // A layer inside `op` (layer_norm) makes variables: their initial values, held fixed.
  reference::Variables variables = reference::initialize_variables(graph, seed);
  // The loss is fetched too: a gradient such as that of sum(x) needs no fed value, and the
  // interpreter reads the batch size only from the inputs the fetches use.
  std::vector<Tensor> fetches = grads;
  fetches.push_back(loss);
  const std::vector<Array> analytic = reference::run(graph, fetches, feeds, variables);
  // The CPU JIT computes the same gradients in f32, within their error bounds.
  towerjit::testing::require_jit_matches(graph, fetches, feeds, variables, what);
  for (size_t w = 0; w < wrt.size(); ++w) {
    const std::string name = "x" + std::to_string(wrt_arg[w]);
    Array& value = feeds[name];
    const Worst worst = compare(value, analytic[w], [&] {
      return reference::run(graph, {loss}, feeds, variables)[0].item();
    });
    INFO(report(what, name, args[wrt_arg[w]].shape, worst));
    CHECK(worst.error <= kTolerance);
  }
}

// The same check for a model: the gradient of `loss` w.r.t. each of `vars` (variable nodes),
// perturbing the values held in `variables`.
inline void check_variables(const std::string& what, const Graph& graph, Tensor loss,
                            const std::vector<Tensor>& vars, const reference::Feeds& feeds,
                            reference::Variables& variables) {
  std::vector<Tensor> fetches = grad(loss, vars);
  fetches.push_back(loss);  // fixes the batch size, as in check_op
  const std::vector<Array> analytic = reference::run(graph, fetches, feeds, variables);
  towerjit::testing::require_jit_matches(graph, fetches, feeds, variables, what);
  for (size_t v = 0; v < vars.size(); ++v) {
    const std::string& name = vars[v].node().attrs.name;
    Array& value = variables.at(name);
    const Worst worst = compare(value, analytic[v], [&] {
      return reference::run(graph, {loss}, feeds, variables)[0].item();
    });
    INFO(report(what, "variable \"" + name + "\"", vars[v].shape(), worst));
    CHECK(worst.error <= kTolerance);
  }
}

}  // namespace gradcheck
