// Initialisers: closed-form definitions drawn from Philox.
//
// Which random numbers an element uses (so any backend or tool can reproduce a variable):
// every draw is philox_uniform(seed, stream = variable_key, index).
//   - uniform, glorot_uniform: element i uses index i.
//   - normal: element i uses indices 2i and 2i+1 (Box-Muller, cosine branch):
//       z = sqrt(-2 ln(1 - u0)) * cos(2 pi u1); 1 - u0 lies in (0, 1], so log(0) never occurs.
//   - truncated_normal, he_normal: attempt k (k = 0, 1, ...) of element i is the normal above
//     drawn from indices k * 2^48 + 2i and k * 2^48 + 2i + 1; the first attempt within two
//     standard deviations is kept. Attempts are disjoint index ranges, so each element's
//     redraws are deterministic and independent of every other element's. (A rejection has
//     probability 0.0455; 64 rejections in a row never happen in practice, and after
//     kMaxAttempts the mean is used so the loop is bounded.)
#include "dsl/initializer.h"

#include <cmath>
#include <numbers>
#include <sstream>

#include "dsl/error.h"
#include "dsl/philox.h"

namespace towerjit {

namespace {

using Kind = Initializer::Kind;

constexpr uint64_t kAttemptStride = uint64_t{1} << 48;
constexpr int kMaxAttempts = 64;
// Keras' VarianceScaling(distribution="truncated_normal") divides by the standard deviation
// of a unit normal truncated to [-2, 2], so the result has exactly the requested variance.
constexpr double kTruncatedStddev = 0.87962566103423978;

Initializer make(Kind kind, double a = 0, double b = 0) {
  Initializer init;
  init.kind = kind;
  init.a = a;
  init.b = b;
  return init;
}

// A standard normal from the uniforms at `index` and `index + 1`.
double box_muller(uint64_t seed, uint64_t stream, uint64_t index) {
  const double u0 = philox_uniform(seed, stream, index);
  const double u1 = philox_uniform(seed, stream, index + 1);
  return std::sqrt(-2.0 * std::log(1.0 - u0)) * std::cos(2.0 * std::numbers::pi * u1);
}

// A standard normal truncated to [-2, 2], by redrawing from disjoint index ranges.
double truncated_unit_normal(uint64_t seed, uint64_t stream, uint64_t i) {
  for (int k = 0; k < kMaxAttempts; ++k) {
    const double z = box_muller(seed, stream, k * kAttemptStride + 2 * i);
    if (std::abs(z) <= 2.0) return z;
  }
  return 0.0;
}

std::string fmt(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

namespace init {

Initializer zeros() { return make(Kind::zeros); }
Initializer constant(double value) { return make(Kind::constant, value); }
Initializer uniform(double low, double high) { return make(Kind::uniform, low, high); }
Initializer normal(double mean, double stddev) { return make(Kind::normal, mean, stddev); }
Initializer truncated_normal(double mean, double stddev) {
  return make(Kind::truncated_normal, mean, stddev);
}
Initializer glorot_uniform() { return make(Kind::glorot_uniform); }
Initializer he_normal() { return make(Kind::he_normal); }
Initializer copy_of(const std::string& source) {
  Initializer init = make(Kind::copy);
  init.source = source;
  return init;
}

}  // namespace init

std::string Initializer::str() const {
  switch (kind) {
    case Kind::zeros: return "zeros";
    case Kind::constant: return "constant(" + fmt(a) + ")";
    case Kind::uniform: return "uniform(" + fmt(a) + ", " + fmt(b) + ")";
    case Kind::normal: return "normal(mean=" + fmt(a) + ", stddev=" + fmt(b) + ")";
    case Kind::truncated_normal:
      return "truncated_normal(mean=" + fmt(a) + ", stddev=" + fmt(b) + ")";
    case Kind::glorot_uniform: return "glorot_uniform";
    case Kind::he_normal: return "he_normal";
    case Kind::copy: return "copy_of(" + source + ")";
  }
  return "unknown";
}

Fans compute_fans(const Shape& shape) {
  const auto& d = shape.dims();
  switch (d.size()) {
    case 0: return {1, 1};
    case 1: return {double(d[0]), double(d[0])};
    case 2: return {double(d[0]), double(d[1])};  // dense kernel [in, out]
    default: {
      // Convolution filters [out, in, spatial...] (our OIHW layout; Keras' HWIO reordered).
      double receptive = 1;
      for (size_t i = 2; i < d.size(); ++i) receptive *= double(d[i]);
      return {double(d[1]) * receptive, double(d[0]) * receptive};
    }
  }
}

uint64_t stable_hash(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;  // FNV-1a 64 prime
  }
  return h;
}

std::vector<double> initial_values(const Initializer& init, const Shape& shape, uint64_t seed,
                                   uint64_t variable_key, std::source_location loc) {
  user_check(!shape.has_batch(), loc)
      << "cannot initialise a variable of shape " << shape.str() << " with " << init.str()
      << ": the batch dimension B is not a constant; give variables constant dimensions";
  user_check(init.kind != Kind::copy, loc)
      << "cannot sample " << init.str() << " on its own: a copy takes another variable's initial "
      << "value; initialise the graph's variables together with initialize_variables(graph, seed)";
  const uint64_t n = static_cast<uint64_t>(shape.static_elements());
  std::vector<double> out(n);
  const Fans fans = compute_fans(shape);
  const uint64_t key = variable_key;
  for (uint64_t i = 0; i < n; ++i) {
    double v = 0;
    switch (init.kind) {
      case Kind::zeros: v = 0; break;
      case Kind::constant: v = init.a; break;
      case Kind::uniform:
        v = init.a + (init.b - init.a) * philox_uniform(seed, key, i);
        break;
      case Kind::normal: v = init.a + init.b * box_muller(seed, key, 2 * i); break;
      case Kind::truncated_normal:
        v = init.a + init.b * truncated_unit_normal(seed, key, i);
        break;
      case Kind::glorot_uniform: {
        const double limit = std::sqrt(6.0 / (fans.in + fans.out));
        v = limit * (2.0 * philox_uniform(seed, key, i) - 1.0);
        break;
      }
      case Kind::he_normal: {
        const double stddev = std::sqrt(2.0 / fans.in) / kTruncatedStddev;
        v = stddev * truncated_unit_normal(seed, key, i);
        break;
      }
      case Kind::copy: break;  // rejected above
    }
    // A draw is an f32 number, the same on every backend; a constant keeps the user's value.
    out[i] = init.kind == Kind::constant ? v : static_cast<float>(v);
  }
  return out;
}

std::vector<float> sample(const Initializer& init, const Shape& shape, uint64_t seed,
                          uint64_t variable_key, std::source_location loc) {
  const std::vector<double> values = initial_values(init, shape, seed, variable_key, loc);
  return std::vector<float>(values.begin(), values.end());  // rounds a constant, once
}

}  // namespace towerjit
