// The one comparison of float32 results against the reference interpreter's exact ones: each
// element must lie within the error bound the interpreter derives for it
// (jit/reference/error_bounds.cpp: Higham's gamma_n of the magnitudes for sums and products,
// each op's rounding, what each op makes of its inputs' errors). A flat relative tolerance
// would fail a dot product whose terms cancel to near zero, and pass a bug on a large value.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>

#include "jit/reference/array.h"

namespace towerjit::testing {

// The element that exceeds its bound by the most (a NaN must meet a NaN, an infinity the same
// infinity), said in words: the element, both values, the error and the bound. Empty when every
// element is within its bound.
inline std::optional<std::string> bound_violation(const reference::Array& got, const reference::Array& want,
                                                  const reference::Array& bound) {
  if (!(got.shape == want.shape) || bound.size() != want.size())
    return "shape " + got.shape.str() + ", expected " + want.shape.str();
  int64_t worst = -1, unbounded = 0;
  double worst_excess = 1;  // error / bound of the worst element
  for (int64_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i], b = std::isnan(bound[i]) ? INFINITY : bound[i];
    unbounded += std::isinf(b);
    if ((std::isnan(g) && std::isnan(w)) || g == w) continue;
    const double error = std::fabs(g - w);
    const double excess = std::isnan(error) ? INFINITY : error <= b ? 0 : error / b;
    if (excess > worst_excess || (excess == INFINITY && worst < 0)) worst = i, worst_excess = excess;
  }
  if (worst < 0) return std::nullopt;
  std::ostringstream m;
  m.precision(9);
  m << "shape " << want.shape.str() << ": element " << worst << " is " << got[worst] << ", exact "
    << want[worst] << ", error " << std::fabs(got[worst] - want[worst]) << " over its bound "
    << bound[worst] << " (" << unbounded << " of " << want.size() << " elements unbounded)";
  return m.str();
}

// A Catch2 check of bound_violation, named `what` in the message.
inline void check_within_bounds(const reference::Array& got, const reference::Array& want,
                                const reference::Array& bound, const std::string& what) {
  const std::optional<std::string> violation = bound_violation(got, want, bound);
  INFO(what << ": " << violation.value_or("within bounds"));
  CHECK(!violation);
}

}  // namespace towerjit::testing
