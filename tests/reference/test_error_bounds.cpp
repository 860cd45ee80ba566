// The reference's error bounds (jit/reference/error_bounds.cpp), the tolerance of every backend
// test: honest float32 arithmetic stays inside them, in any summation order, and the mistakes
// a kernel makes (a dropped term, a wrong tie, a wrong element) do not.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "jit/reference/interpreter.h"
#include "tests/jit/error_bound_check.h"
#include "tests/jit/jit_check.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::reference::Array;
using namespace tj::testing;

namespace {

struct Bounded {
  Array value, bound;
};

Bounded run_bounded(tj::Tensor t, const tj::reference::Feeds& feeds) {
  tj::reference::Variables vars;
  tj::reference::ErrorBounds bounds;
  Bounded out;
  out.value = tj::reference::run(t.graph(), {t}, feeds, vars, {.bounds = &bounds}).at(0);
  out.bound = bounds.fetches.at(0);
  return out;
}

// C = A B in float32, summing each dot product in the order given by `order` (k indices).
Array float_matmul(const Array& a, const Array& b, int64_t m, int64_t k, int64_t n,
                   const std::vector<int64_t>& order) {
  Array c({m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0;
      for (int64_t p : order) acc += static_cast<float>(a[i * k + p]) * static_cast<float>(b[p * n + j]);
      c[i * n + j] = acc;
    }
  return c;
}

}  // namespace

TEST_CASE("float32 matrix products lie within their bounds in any order, a dropped term does not", "[reference][bounds]") {
  const int64_t m = 13, k = 299, n = 11;
  tj::Graph g;
  tj::GraphScope use(g);
  auto a = tj::input("a", {m, k}), b = tj::input("b", {k, n});
  const Array av = random_array({m, k}, 21), bv = random_array({k, n}, 22);
  const Bounded exact = run_bounded(tj::matmul(a, b), {{"a", av}, {"b", bv}});
  std::vector<int64_t> forward(k);
  std::iota(forward.begin(), forward.end(), 0);
  std::vector<int64_t> backward(forward.rbegin(), forward.rend());
  CHECK_FALSE(bound_violation(float_matmul(av, bv, m, k, n, forward), exact.value, exact.bound));
  CHECK_FALSE(bound_violation(float_matmul(av, bv, m, k, n, backward), exact.value, exact.bound));
  // An element near zero may lose every digit and still be right: its bound is absolute.
  int64_t smallest = 0;
  for (int64_t i = 0; i < exact.value.size(); ++i)
    if (std::fabs(exact.value[i]) < std::fabs(exact.value[smallest])) smallest = i;
  CHECK(exact.bound[smallest] > 1e-5 * std::fabs(exact.value[smallest]));
  // One product term missing from one element.
  Array dropped = float_matmul(av, bv, m, k, n, forward);
  dropped[5 * n + 3] -= av[5 * k + 100] * bv[100 * n + 3];
  CHECK(bound_violation(dropped, exact.value, exact.bound));
}

TEST_CASE("TF32 products lie within the TF32 bound, even summed by truncation, and not within the f32 one",
          "[reference][bounds]") {
  // As TF32 tensor cores compute: inputs rounded to 10 mantissa bits (to nearest, ties away),
  // exact products, summed in f32; here the sums truncate (round toward zero), as the tensor
  // cores' are measured to, the worst the bound must take.
  const int64_t m = 16, k = 1000, n = 8;
  tj::Graph g;
  tj::GraphScope use(g);
  auto a = tj::input("a", {m, k}), b = tj::input("b", {k, n});
  const Array av = random_array({m, k}, 31, 0.25, 1), bv = random_array({k, n}, 32, 0.25, 1);
  tj::reference::Variables vars;
  tj::reference::ErrorBounds f32_bounds, tf32_bounds;
  const Array exact = tj::reference::run(g, {tj::matmul(a, b)}, {{"a", av}, {"b", bv}}, vars,
                                         {.bounds = &f32_bounds}).at(0);
  tj::reference::run(g, {tj::matmul(a, b)}, {{"a", av}, {"b", bv}}, vars, {.bounds = &tf32_bounds, .tf32_products = true});
  auto tf32 = [](double x) {  // cvt.rna.tf32.f32
    float f = static_cast<float>(x);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u = (u + 0x1000u) & 0xffffe000u;
    std::memcpy(&f, &u, 4);
    return f;
  };
  Array got({m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double sum = static_cast<double>(acc) + static_cast<double>(tf32(av[i * k + p]) * tf32(bv[p * n + j]));
        float rounded = static_cast<float>(sum);
        if (std::fabs(rounded) > std::fabs(sum)) rounded = std::nextafter(rounded, 0.0f);  // toward zero
        acc = rounded;
      }
      got[i * n + j] = acc;
    }
  CHECK_FALSE(bound_violation(got, exact, tf32_bounds.fetches[0]));
  CHECK(bound_violation(got, exact, f32_bounds.fetches[0]));
  // And the TF32 bound is about 2^-10 plus the sums' k 2^-23 of the magnitudes, no wider.
  double magnitude = 0;
  for (int64_t p = 0; p < k; ++p) magnitude += av[p] * bv[p * n];
  CHECK(tf32_bounds.fetches[0][0] <= (0x1p-10 + 1.01 * k * 0x1p-23) * magnitude * 1.01);
}

TEST_CASE("a long float32 sum lies within its bound, one element counted twice does not", "[reference][bounds]") {
  // The probabilistic bound (about 10 sqrt(n) u of the magnitudes, rounding_gamma) is what
  // makes this catchable: the worst case, n u, is 3 here, six elements' worth.
  const int64_t count = 10007;
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {count});
  const Array xv = random_array({count}, 5, 0, 1);  // no cancellation: the sum is its magnitude
  const Bounded exact = run_bounded(tj::sum(x), {{"x", xv}});
  float acc = 0;
  for (double v : xv.data) acc += static_cast<float>(v);
  Array got(tj::Shape{});
  got[0] = acc;
  CHECK_FALSE(bound_violation(got, exact.value, exact.bound));
  const double largest = *std::max_element(xv.data.begin(), xv.data.end());
  got[0] = acc + static_cast<float>(largest);
  CHECK(bound_violation(got, exact.value, exact.bound));
  CHECK(exact.bound[0] <= 11 * std::sqrt(count + 1.0) * 0x1p-24 * exact.value[0]);
}

TEST_CASE("elementwise chains: float32 libm results within bounds a few ulps wide", "[reference][bounds]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {64});
  auto y = tj::log(tj::exp(x) + 1.0) * tj::tanh(x);
  const Array xv = random_array({64}, 9, -3, 3);
  const Bounded exact = run_bounded(y, {{"x", xv}});
  Array got({64});
  for (int64_t i = 0; i < 64; ++i) {
    const float v = static_cast<float>(xv[i]);
    got[i] = logf(expf(v) + 1.0f) * tanhf(v);
  }
  CHECK_FALSE(bound_violation(got, exact.value, exact.bound));
  for (int64_t i = 0; i < 64; ++i) CHECK(exact.bound[i] <= 64 * 0x1p-24 * std::fabs(exact.value[i]) + 1e-30);
  got[7] = std::nextafter(std::nextafter(static_cast<float>(exact.value[7]), 1e9f), 1e9f) * 1.0001f;
  CHECK(bound_violation(got, exact.value, exact.bound));
}

TEST_CASE("comparisons are exact when the errors decide them, and may flip when they do not", "[reference][bounds]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {3});
  // x * 3 rounds, so x * 3 > 3 x is undecided only where the two sides are within that rounding.
  auto exact_sides = tj::greater(x, 0.5);
  auto rounded_sides = tj::greater(x * 3.0, x + x + x);
  const Array xv({3}, {0.25, 0.75, 1.0 / 3});  // the last is not a float: its input rounds
  const Bounded e = run_bounded(exact_sides, {{"x", xv}});
  CHECK(e.bound.data == std::vector<double>{0, 0, 0});
  const Bounded r = run_bounded(rounded_sides, {{"x", xv}});
  CHECK(r.bound.data == std::vector<double>{1, 1, 1});
  // An input the backend receives rounded to float is bounded by that rounding.
  const Bounded in = run_bounded(x * 1.0, {{"x", xv}});
  CHECK(in.bound[2] >= std::fabs(xv[2] - static_cast<float>(xv[2])));
}
