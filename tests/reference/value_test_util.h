// Helpers shared by the reference interpreter's value tests.
#pragma once

#include <catch2/catch.hpp>

#include "jit/reference/interpreter.h"

namespace towerjit::reference::testing {

// Evaluates one tensor of its graph with `feeds` and no variables.
inline Array eval(Tensor t, const Feeds& feeds = {}) {
  Variables vars;
  return run(t.graph(), {t}, feeds, vars).at(0);
}

// `got` has `shape` and, element by element, the values `want` (within `tol`).
inline void require_values(const Array& got, const Shape& shape, const std::vector<double>& want,
                           double tol = 1e-12) {
  INFO("shape " << got.shape.str() << ", expected " << shape.str());
  REQUIRE(got.shape == shape);
  REQUIRE(got.data.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(got.data[i] == Approx(want[i]).margin(tol));
  }
}

// from, from + 1, ... in row-major order.
inline Array iota(Shape shape, double from = 1, DType dtype = DType::f32) {
  Array a(shape, dtype);
  for (int64_t i = 0; i < a.size(); ++i) a[i] = from + static_cast<double>(i);
  return a;
}

}  // namespace towerjit::reference::testing
