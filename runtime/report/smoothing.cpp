#include "runtime/report/smoothing.h"

#include <algorithm>
#include <cmath>

namespace towerjit::report {

std::vector<double> smooth_ema(const std::vector<double>& values, double w) {
  const bool constant =
      std::all_of(values.begin(), values.end(), [&](double v) { return !values.empty() && v == values[0]; });
  std::vector<double> out;
  out.reserve(values.size());
  double last = 0, decay = 1;  // decay = w^n, kept as a product rather than pow() each step
  for (double y : values) {
    if (constant || !std::isfinite(y)) {
      out.push_back(y);
      continue;
    }
    last = last * w + (1 - w) * y;
    decay *= w;
    out.push_back(w == 1 ? last : last / (1 - decay));
  }
  return out;
}

}  // namespace towerjit::report
