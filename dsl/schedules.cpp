// Schedules build scalar expressions; nothing here runs on the host at training time.
#include "dsl/schedules.h"

#include <cmath>
#include <numbers>
#include <sstream>

#include "dsl/ops_internal.h"

namespace towerjit {

namespace {

std::string fmt(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// floor(x) for x >= 0. The graph has no floor op; a cast to i32 truncates toward zero, which
// is floor for the non-negative steps schedules see (exact below 2^24, like the step itself).
Tensor floor_nonnegative(Tensor x, Loc loc) {
  return cast(cast(x, DType::i32, loc), DType::f32, loc);
}

// cos(pi * p) for p in [0, 1]. The graph has no cos op (adding one touches every backend for
// one scalar per step), so: cos(pi p) = -sin(x) with x = pi (p - 1/2) in [-pi/2, pi/2], and
// sin's Taylor series to x^21, whose remainder is below (pi/2)^23 / 23! < 2e-18.
Tensor cos_pi_unit(Tensor p, Loc loc) {
  Tensor x = mul(sub(p, 0.5, loc), std::numbers::pi, loc);
  Tensor x2 = mul(x, x, loc);
  constexpr int kTerms = 11;  // x^1, x^3, ..., x^21
  double coefficient[kTerms];
  double factorial = 1;
  for (int k = 0; k < kTerms; ++k) {
    if (k > 0) factorial *= (2.0 * k) * (2.0 * k + 1);
    coefficient[k] = (k % 2 ? -1.0 : 1.0) / factorial;
  }
  Tensor s = constant(coefficient[kTerms - 1], {}, DType::f32, loc);
  for (int k = kTerms - 2; k >= 0; --k) s = add(mul(s, x2, loc), coefficient[k], loc);
  return neg(mul(s, x, loc), loc);
}

void check_positive(double v, const char* what, const char* schedule, Loc loc) {
  user_check(v > 0 && std::isfinite(v), loc)
      << schedule << ": " << what << " must be a positive number but is " << v;
}

}  // namespace

namespace {
// torch.optim's rule: a learning rate is finite and not negative.
double checked_rate(double value, const char* what, Loc loc) {
  user_check(std::isfinite(value) && value >= 0, loc)
      << what << " " << value << " must be finite and >= 0 (a negative rate climbs the loss instead of descending "
      << "it); use e.g. 0.001 for Adam or 0.05 for momentum";
  return value;
}
}  // namespace

Schedule::Schedule(double value, Loc loc)
    : description_(fmt(checked_rate(value, "learning rate", loc))),
      build_([value, loc](Tensor step) { return constant(value, {}, DType::f32, loc); }) {}

Schedule::Schedule(std::string description, Build build)
    : description_(std::move(description)), build_(std::move(build)) {}

Tensor Schedule::at(Tensor step, Loc loc) const {
  user_check(step.valid() && step.rank() == 0 && step.dtype() == DType::f32, loc)
      << "schedule " << description_ << ": the step must be an f32 scalar but got "
      << (step.valid() ? step.describe() : std::string("an empty tensor"))
      << "; pass global_step() or an f32 scalar input";
  GraphScope in(step.graph());  // constants land in the step's graph, not the current one
  return build_(step);
}

Schedule constant_schedule(double value, Loc loc) { return Schedule(value, loc); }

Schedule exponential_decay(double lr0, double decay_steps, double rate, bool staircase,
                           Loc loc) {
  checked_rate(lr0, "exponential_decay: the initial learning rate", loc);
  check_positive(decay_steps, "decay_steps", "exponential_decay", loc);
  check_positive(rate, "rate", "exponential_decay", loc);
  std::string text = "exponential_decay(lr0=" + fmt(lr0) + ", decay_steps=" + fmt(decay_steps) +
                     ", rate=" + fmt(rate) + (staircase ? ", staircase)" : ")");
  return Schedule(text, [=](Tensor step) {
    Tensor p = div(step, decay_steps, loc);
    if (staircase) p = floor_nonnegative(p, loc);
    return mul(lr0, pow(rate, p, loc), loc);
  });
}

Schedule piecewise_constant(std::vector<double> boundaries, std::vector<double> values,
                            Loc loc) {
  user_check(values.size() == boundaries.size() + 1, loc)
      << "piecewise_constant: " << boundaries.size() << " boundaries need "
      << boundaries.size() + 1 << " values (one before the first boundary, one after each) "
      << "but got " << values.size();
  for (size_t i = 1; i < boundaries.size(); ++i)
    user_check(boundaries[i - 1] < boundaries[i], loc)
        << "piecewise_constant: boundaries must strictly increase, but boundary " << i - 1
        << " is " << boundaries[i - 1] << " and boundary " << i << " is " << boundaries[i];
  std::string text = "piecewise_constant(" + std::to_string(boundaries.size()) + " boundaries)";
  return Schedule(text, [=](Tensor step) {
    // Later boundaries override earlier ones: past boundary i, the value is values[i + 1].
    Tensor v = constant(values[0], {}, DType::f32, loc);
    for (size_t i = 0; i < boundaries.size(); ++i)
      v = where(greater(step, boundaries[i], loc), values[i + 1], v, loc);
    return v;
  });
}

Schedule cosine_decay(double lr0, double decay_steps, double alpha, Loc loc) {
  check_positive(decay_steps, "decay_steps", "cosine_decay", loc);
  std::string text = "cosine_decay(lr0=" + fmt(lr0) + ", decay_steps=" + fmt(decay_steps) +
                     ", alpha=" + fmt(alpha) + ")";
  return Schedule(text, [=](Tensor step) {
    Tensor p = div(minimum(step, decay_steps, loc), decay_steps, loc);
    Tensor cosine = mul(0.5, add(1.0, cos_pi_unit(p, loc), loc), loc);
    return mul(lr0, add(mul(1.0 - alpha, cosine, loc), alpha, loc), loc);
  });
}

Schedule linear_warmup(Schedule after, double warmup_steps, Loc loc) {
  check_positive(warmup_steps, "warmup_steps", "linear_warmup", loc);
  std::string text = "linear_warmup(" + after.str() + ", warmup_steps=" + fmt(warmup_steps) + ")";
  return Schedule(text, [=](Tensor step) {
    Tensor ramp = minimum(1.0, div(add(step, 1.0, loc), warmup_steps, loc), loc);
    return mul(after.at(step, loc), ramp, loc);
  });
}

}  // namespace towerjit
