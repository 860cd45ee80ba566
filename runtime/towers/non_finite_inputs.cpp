#include "runtime/towers/non_finite_inputs.h"

#include <cmath>

namespace towerjit {

std::string first_non_finite_input(const HostFeeds& feeds) {
  for (const auto& [name, t] : feeds) {
    if (t.dtype != DType::f32) continue;
    const int64_t row = t.shape.rank() > 0 && t.shape[0] > 0 ? static_cast<int64_t>(t.f32.size()) / t.shape[0] : 1;
    for (size_t i = 0; i < t.f32.size(); ++i)
      if (!std::isfinite(t.f32[i]))
        return "input \"" + name + "\" holds " + (std::isnan(t.f32[i]) ? "NaN" : "an infinity") + " at example " +
               std::to_string(static_cast<int64_t>(i) / row);
  }
  return "";
}

}  // namespace towerjit
