// Variable initialisers, drawn from Philox 4x32-10 keyed by (seed, variable, element), so the
// same seed gives the same weights on every backend and every tower count.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "dsl/shape.h"

namespace towerjit {

struct Initializer {
  enum class Kind {
    zeros, constant, uniform, normal, truncated_normal, glorot_uniform, he_normal,
    copy,  // the initial value of the variable named `source` (an EMA's shadow weights)
  };
  Kind kind = Kind::zeros;
  double a = 0;  // constant: the value; uniform: low; normal, truncated_normal: mean
  double b = 0;  // uniform: high; normal, truncated_normal: standard deviation
  std::string source;  // copy: the full name of the variable to copy (declared earlier)

  std::string str() const;
};

// The initialisers live in their own namespace: `init::constant(0.1)` is an initialiser,
// `constant(0.1)` a tensor.
namespace init {

Initializer zeros();
Initializer constant(double value);
Initializer uniform(double low, double high);
Initializer normal(double mean = 0, double stddev = 1);
// Normal, redrawn until within two standard deviations of the mean (TF's definition).
Initializer truncated_normal(double mean = 0, double stddev = 1);
// U(-l, l) with l = sqrt(6 / (fan_in + fan_out)).
Initializer glorot_uniform();
// Variance 2 / fan_in, as Keras: a normal truncated to two standard deviations, with stddev
// sqrt(2 / fan_in) / 0.8796... (that truncation's stddev) so the variance is exact.
Initializer he_normal();
// The initial value of the variable `source` (full name, created before this one). It is
// resolved where a graph's variables are initialised together (initialize_variables), since
// sample() sees one variable alone.
Initializer copy_of(const std::string& source);

}  // namespace init

// Fan-in and fan-out as Keras computes them: [in, out] for dense kernels, and
// [out, in, kh, kw] for convolution filters (receptive field times channels).
struct Fans {
  double in, out;
};
Fans compute_fans(const Shape& shape);

// The initial values of a variable of a concrete shape, as f32 storage holds them.
// `variable_key` identifies the variable (a hash of its full name), so adding a variable never
// changes another one's values.
// Errors (a shape with the batch, a copy_of that needs the other variables) name `loc`.
std::vector<float> sample(const Initializer& init, const Shape& shape, uint64_t seed,
                          uint64_t variable_key, std::source_location loc = std::source_location::current());

// The same values before f32 storage: random draws are f32 numbers already (every backend
// starts from the same weights), but a constant keeps the precision it was given, so the
// double-precision reference interpreter starts init::constant(0.1) at 0.1, not at
// 0.10000000149 (float(0.1)), as PyTorch in float64 does. sample() is these rounded to float.
std::vector<double> initial_values(const Initializer& init, const Shape& shape, uint64_t seed,
                                   uint64_t variable_key,
                                   std::source_location loc = std::source_location::current());

// FNV-1a of a name: the stable key of a variable or op in the RNG.
uint64_t stable_hash(const std::string& name);

}  // namespace towerjit
