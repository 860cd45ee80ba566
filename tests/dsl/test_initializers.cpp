// Initialisers: moments against the closed forms on 100k+ elements, bounds, fans,
// determinism and independence across variables.
#include <catch2/catch.hpp>
#include <cmath>

#include "towerjit.h"

using namespace towerjit;

namespace {

struct Moments {
  double mean = 0, variance = 0, min = 1e300, max = -1e300;
};

Moments moments(const std::vector<float>& v) {
  Moments m;
  for (float x : v) {
    m.mean += x;
    m.min = std::min(m.min, double(x));
    m.max = std::max(m.max, double(x));
  }
  m.mean /= double(v.size());
  for (float x : v) m.variance += (x - m.mean) * (x - m.mean);
  m.variance /= double(v.size());
  return m;
}

// Variance of a unit normal truncated to [-2, 2]: 1 - 4 phi(2) / (Phi(2) - Phi(-2)).
const double kTruncatedVariance = 1.0 - 4.0 * std::exp(-2.0) / std::sqrt(2.0 * M_PI) /
                                            std::erf(2.0 / std::sqrt(2.0));

const uint64_t kSeed = 1234, kKey = stable_hash("layer/kernel");

}  // namespace

TEST_CASE("zeros and constant fill every element", "[dsl]") {
  for (float x : sample(init::zeros(), {3, 5}, kSeed, kKey)) REQUIRE(x == 0.0f);
  const auto c = sample(towerjit::init::constant(0.25), {7}, kSeed, kKey);
  REQUIRE(c.size() == 7);
  for (float x : c) REQUIRE(x == 0.25f);
  CHECK(sample(init::zeros(), {}, kSeed, kKey).size() == 1);
}

TEST_CASE("initial values keep a constant's double and the draws f32 storage holds", "[dsl]") {
  // 0.1 is not a float: the reference interpreter's start keeps it, f32 storage rounds once.
  for (double x : initial_values(init::constant(0.1), {4}, kSeed, kKey)) CHECK(x == 0.1);
  for (float x : sample(init::constant(0.1), {4}, kSeed, kKey)) CHECK(x == 0.1f);
  // A draw is an f32 number in both, so every backend starts from the same weights.
  for (const Initializer& init : {init::uniform(-1, 1), init::normal(0.5, 2), init::he_normal()}) {
    const std::vector<double> exact = initial_values(init, {9, 4}, kSeed, kKey);
    const std::vector<float> stored = sample(init, {9, 4}, kSeed, kKey);
    INFO(init.str());
    REQUIRE(exact.size() == stored.size());
    for (size_t i = 0; i < exact.size(); ++i) CHECK(exact[i] == double(stored[i]));
  }
}

TEST_CASE("uniform has the moments of U(low, high)", "[dsl]") {
  const auto m = moments(sample(init::uniform(-1, 3), {100000}, kSeed, kKey));
  CHECK(m.min >= -1.0);
  CHECK(m.max < 3.0);
  CHECK(m.mean == Approx(1.0).margin(0.02));
  CHECK(m.variance == Approx(16.0 / 12.0).epsilon(0.02));
}

TEST_CASE("normal has the requested mean and variance and a Gaussian shape", "[dsl]") {
  const auto v = sample(init::normal(0.5, 2.0), {100000}, kSeed, kKey);
  const auto m = moments(v);
  CHECK(m.mean == Approx(0.5).margin(0.03));
  CHECK(m.variance == Approx(4.0).epsilon(0.02));
  int within_one = 0;
  for (float x : v) within_one += std::abs(x - 0.5) < 2.0;
  CHECK(within_one / 100000.0 == Approx(0.6827).margin(0.01));
  for (float x : v) REQUIRE(std::isfinite(x));
}

TEST_CASE("truncated_normal stays within two stddev with variance 0.774 stddev^2", "[dsl]") {
  const auto m = moments(sample(init::truncated_normal(1.0, 2.0), {100000}, kSeed, kKey));
  CHECK(m.min >= 1.0 - 4.0);
  CHECK(m.max <= 1.0 + 4.0);
  CHECK(m.mean == Approx(1.0).margin(0.03));
  CHECK(kTruncatedVariance == Approx(0.7737).margin(0.0005));
  CHECK(m.variance == Approx(kTruncatedVariance * 4.0).epsilon(0.02));
}

TEST_CASE("glorot_uniform is U(-l, l) with l = sqrt(6 / (fan_in + fan_out))", "[dsl]") {
  const Shape shape{300, 400};
  const double limit = std::sqrt(6.0 / 700.0);
  const auto m = moments(sample(init::glorot_uniform(), shape, kSeed, kKey));
  CHECK(m.min >= -limit);
  CHECK(m.max <= limit);
  CHECK(m.max > 0.99 * limit);
  CHECK(m.mean == Approx(0.0).margin(0.01 * limit));
  CHECK(m.variance == Approx(limit * limit / 3.0).epsilon(0.02));
}

TEST_CASE("he_normal is Keras' truncated normal with variance 2 / fan_in", "[dsl]") {
  const Shape shape{64, 32, 3, 3};  // conv [out, in, kh, kw]: fan_in = 32 * 9
  const double fan_in = 32 * 9;
  const double stddev = std::sqrt(2.0 / fan_in) / 0.87962566103423978;
  const auto m = moments(sample(init::he_normal(), shape, kSeed, kKey));
  CHECK(m.min >= -2.0 * stddev);
  CHECK(m.max <= 2.0 * stddev);
  CHECK(m.mean == Approx(0.0).margin(0.02 * stddev));
  CHECK(m.variance == Approx(2.0 / fan_in).epsilon(0.03));
}

TEST_CASE("compute_fans follows Keras for dense kernels and OIHW filters", "[dsl]") {
  auto fans = [](Shape s) {
    const Fans f = compute_fans(s);
    return std::pair{f.in, f.out};
  };
  CHECK(fans({}) == std::pair{1.0, 1.0});
  CHECK(fans({7}) == std::pair{7.0, 7.0});
  CHECK(fans({784, 512}) == std::pair{784.0, 512.0});
  CHECK(fans({64, 32, 3, 5}) == std::pair{32.0 * 15, 64.0 * 15});
}

TEST_CASE("stable_hash is FNV-1a 64", "[dsl]") {
  CHECK(stable_hash("") == 0xcbf29ce484222325ull);
  CHECK(stable_hash("a") == 0xaf63dc4c8601ec8cull);
  CHECK(stable_hash("foobar") == 0x85944171f73967e8ull);
  CHECK(stable_hash("fc1/kernel") != stable_hash("fc1/bias"));
}

TEST_CASE("sampling is deterministic and independent across variables", "[dsl]") {
  for (const Initializer& init : {init::uniform(-1, 1), init::normal(), init::truncated_normal(), init::glorot_uniform(),
                                  init::he_normal()}) {
    INFO(init.str());
    const auto a = sample(init, {100, 50}, kSeed, stable_hash("fc1/kernel"));
    REQUIRE(a == sample(init, {100, 50}, kSeed, stable_hash("fc1/kernel")));
    const auto b = sample(init, {100, 50}, kSeed, stable_hash("fc2/kernel"));
    const auto c = sample(init, {100, 50}, kSeed + 1, stable_hash("fc1/kernel"));
    double ab = 0, ac = 0, aa = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ab += a[i] * b[i];
      ac += a[i] * c[i];
      aa += a[i] * a[i];
    }
    CHECK(std::abs(ab / aa) < 0.05);  // uncorrelated: |r| ~ 1/sqrt(5000)
    CHECK(std::abs(ac / aa) < 0.05);
  }
}

TEST_CASE("an element's value does not depend on the variable's size", "[dsl]") {
  // Element i uses only indices derived from i (normals: 2i, 2i+1, attempt offsets), so a
  // prefix of a longer variable matches a shorter one with the same key.
  for (const Initializer& init : {init::uniform(0, 1), init::normal(), init::truncated_normal()}) {
    INFO(init.str());
    const auto small = sample(init, {10}, kSeed, kKey);
    const auto big = sample(init, {1000}, kSeed, kKey);
    REQUIRE(std::equal(small.begin(), small.end(), big.begin()));
  }
}

TEST_CASE("initialisers print themselves and refuse the batch dimension", "[dsl]") {
  CHECK(init::zeros().str() == "zeros");
  CHECK(towerjit::init::constant(0.5).str() == "constant(0.5)");
  CHECK(init::uniform(-1, 1).str() == "uniform(-1, 1)");
  CHECK(init::normal(0, 2).str() == "normal(mean=0, stddev=2)");
  CHECK(init::truncated_normal().str() == "truncated_normal(mean=0, stddev=1)");
  CHECK(init::glorot_uniform().str() == "glorot_uniform");
  CHECK(init::he_normal().str() == "he_normal");
  CHECK_THROWS_WITH(sample(init::zeros(), {kBatch, 3}, kSeed, kKey),
                    Catch::Contains("[B,3]") && Catch::Contains("give variables constant dimensions") &&
                        Catch::Contains("tests/dsl/test_initializers.cpp:"));
}
