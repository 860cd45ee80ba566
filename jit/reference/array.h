// The reference interpreter's values: a concrete shape, a dtype and the elements in double,
// row-major. i32 values are held exactly as doubles.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsl/dtype.h"
#include "dsl/shape.h"

namespace towerjit::reference {

struct Array {
  Shape shape;  // no batch symbol: every dimension is known
  DType dtype = DType::f32;
  std::vector<double> data;

  Array() = default;
  Array(Shape s, DType t = DType::f32) : shape(std::move(s)), dtype(t), data(shape.elements(0)) {}
  Array(Shape s, std::vector<double> values, DType t = DType::f32)
      : shape(std::move(s)), dtype(t), data(std::move(values)) {}

  int64_t size() const { return static_cast<int64_t>(data.size()); }
  double operator[](int64_t i) const { return data[i]; }
  double& operator[](int64_t i) { return data[i]; }
  // A scalar's value.
  double item() const { return data.at(0); }
};

// Row-major strides of a concrete shape.
std::vector<int64_t> strides_of(const Shape& shape);

}  // namespace towerjit::reference
