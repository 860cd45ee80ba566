#include "dsl/loss_scale.h"

#include <cmath>

#include "dsl/error.h"
#include "dsl/graph.h"
#include "dsl/ops.h"
#include "dsl/state.h"

namespace towerjit::detail {
namespace {

Tensor scalar_state(Graph& g, const char* name, double initial, Loc loc) {
  return state_variable(g, name, Shape{}, init::constant(initial), loc);
}

}  // namespace

void check_loss_scale(const DynamicLossScale& s, Loc loc) {
  user_check(std::isfinite(s.initial) && s.initial > 0, loc)
      << "loss scale: initial is " << s.initial << " but must be a finite number > 0 (GradScaler's 65536)";
  user_check(std::isfinite(s.growth_factor) && s.growth_factor > 1, loc)
      << "loss scale: growth_factor is " << s.growth_factor << " but must be > 1 (GradScaler's 2)";
  user_check(s.backoff_factor > 0 && s.backoff_factor < 1, loc)
      << "loss scale: backoff_factor is " << s.backoff_factor << " but must be in (0, 1) (GradScaler's 0.5)";
  user_check(s.growth_interval >= 1, loc)
      << "loss scale: growth_interval is " << s.growth_interval << " but must be >= 1 (GradScaler's 2000)";
}

Tensor scale_loss(Tensor loss, const DynamicLossScale& s, Loc loc) {
  GraphScope in(loss.graph());
  return mul(loss, scalar_state(loss.graph(), DynamicLossScale::kScale, s.initial, loc), loc);
}

UnscaledGradients unscale_gradients(const std::vector<Tensor>& grads, const DynamicLossScale& s,
                                    std::vector<Tensor>& out, Loc loc) {
  Graph& g = grads.at(0).graph();
  GraphScope in(g);
  Tensor scale = scalar_state(g, DynamicLossScale::kScale, s.initial, loc);
  Tensor good = scalar_state(g, DynamicLossScale::kGoodSteps, 0, loc);
  Tensor skipped = scalar_state(g, DynamicLossScale::kSkippedSteps, 0, loc);
  // GradScaler multiplies by the reciprocal taken once (exact for a power of two).
  Tensor inverse = div(1.0, scale, loc);
  UnscaledGradients u;
  Tensor largest;  // max |g| over every gradient: infinite or NaN exactly when one element is
  for (const Tensor& grad : grads) {
    u.grads.push_back(mul(grad, inverse, loc));
    Tensor m = max(abs(u.grads.back(), loc), {}, false, loc);
    largest = largest.valid() ? maximum(largest, m, loc) : m;  // maximum keeps a NaN
  }
  // 0 * m is 0 for a finite m and NaN for an infinite or NaN one.
  u.finite = equal(mul(largest, 0.0, loc), 0.0, loc);
  // GradScaler's update: back off and restart the count on a skip; grow after the interval
  // (unless the grown scale would overflow f32).
  Tensor good1 = where(u.finite, add(good, 1.0, loc), 0.0, loc);
  Tensor grow = greater_equal(good1, static_cast<double>(s.growth_interval), loc);
  Tensor grown = mul(scale, s.growth_factor, loc);
  Tensor grown_ok = equal(mul(grown, 0.0, loc), 0.0, loc);
  Tensor kept = where(grow, where(grown_ok, grown, scale, loc), scale, loc);
  out.push_back(assign(scale, where(u.finite, kept, mul(scale, s.backoff_factor, loc), loc), loc));
  out.push_back(assign(good, where(grow, 0.0, good1, loc), loc));
  out.push_back(assign(skipped, add(skipped, sub(1.0, u.finite, loc), loc), loc));
  return u;
}

}  // namespace towerjit::detail
