// Layer values on the reference interpreter: dense is x @ kernel + bias, batch_norm normalises
// and moves its statistics (unbiased variance), dropout zeroes `rate` of the elements.
#include <catch2/catch.hpp>
#include <cmath>

#include "dsl/layers.h"
#include "jit/reference/interpreter.h"

using namespace towerjit;
namespace ref = towerjit::reference;

namespace {

ref::Array iota(Shape shape, double scale, double offset = 0) {
  ref::Array a(shape);
  for (int64_t i = 0; i < a.size(); ++i) a[i] = std::sin(scale * double(i + 1)) * 3.0 + offset;
  return a;
}

}  // namespace

TEST_CASE("dense computes x @ kernel + bias with initialised variables", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 3});
  Tensor y = dense(x, 2, "fc", {.bias_init = init::uniform(1, 2), .weight_decay = {}});
  auto vars = ref::initialize_variables(g, 5);
  const ref::Array xv = iota({4, 3}, 0.7);
  const ref::Array out = ref::run(g, {y}, {{"x", xv}}, vars)[0];
  const ref::Array& k = vars.at("fc/kernel");
  const ref::Array& b = vars.at("fc/bias");
  REQUIRE(out.shape == Shape{4, 2});
  for (int n = 0; n < 4; ++n)
    for (int j = 0; j < 2; ++j) {
      double expect = b[j];
      for (int i = 0; i < 3; ++i) expect += xv[n * 3 + i] * k[i * 2 + j];
      CHECK(out[n * 2 + j] == Approx(expect).margin(1e-6));
    }
  const double limit = std::sqrt(6.0 / 5.0);
  for (double v : k.data) CHECK(std::abs(v) <= limit);
}

TEST_CASE("batch_norm normalises per channel and moves its statistics", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 2, 3, 3});
  Tensor y = batch_norm(x, true, "bn", {.momentum = 0.9, .epsilon = 1e-6});
  Tensor z = batch_norm(x, false, "bn2", {.epsilon = 1e-6});
  auto vars = ref::initialize_variables(g, 1);
  const ref::Array xv = iota({5, 2, 3, 3}, 0.37, 1.0);
  const ref::Array out = ref::run(g, {y}, {{"x", xv}}, vars, {.run_update_ops = true})[0];
  const int64_t n = 5 * 9;
  for (int c = 0; c < 2; ++c) {
    double sx = 0, sxx = 0, sy = 0, syy = 0;
    for (int b = 0; b < 5; ++b)
      for (int i = 0; i < 9; ++i) {
        const int64_t at = (b * 2 + c) * 9 + i;
        sx += xv[at], sxx += xv[at] * xv[at], sy += out[at], syy += out[at] * out[at];
      }
    const double mean = sx / n, var = sxx / n - mean * mean;
    INFO("channel " << c);
    CHECK(sy / n == Approx(0).margin(1e-6));
    CHECK(syy / n == Approx(1).epsilon(1e-4));  // gamma 1, beta 0, biased variance
    CHECK(vars.at("bn/moving_mean")[c] == Approx(0.1 * mean).epsilon(1e-9));
    // Unbiased: var * n / (n - 1).
    CHECK(vars.at("bn/moving_variance")[c] ==
          Approx(0.9 + 0.1 * var * n / (n - 1)).epsilon(1e-9));
  }
  // Inference: (x - moving_mean) / sqrt(moving_variance + eps) with the initial 0 and 1.
  const ref::Array inf = ref::run(g, {z}, {{"x", xv}}, vars)[0];
  for (int64_t i = 0; i < xv.size(); ++i) CHECK(inf[i] == Approx(xv[i] / std::sqrt(1 + 1e-6)));
}

TEST_CASE("dropout zeroes rate of the elements and rescales the rest", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 1000});
  Tensor y = dropout(x, 0.3, true, 11);
  ref::Variables vars;
  ref::Array ones({10, 1000});
  for (double& v : ones.data) v = 1;
  const ref::Array a = ref::run(g, {y}, {{"x", ones}}, vars, {.step = 0})[0];
  const ref::Array b = ref::run(g, {y}, {{"x", ones}}, vars, {.step = 1})[0];
  int zeros = 0, differ = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    REQUIRE((a[i] == 0 || a[i] == Approx(1 / 0.7)));
    zeros += a[i] == 0;
    differ += a[i] != b[i];
  }
  CHECK(zeros / 10000.0 == Approx(0.3).margin(0.02));
  CHECK(differ > 3000);  // a fresh mask every step
  CHECK(ref::run(g, {y}, {{"x", ones}}, vars, {.step = 0})[0].data == a.data);
}
