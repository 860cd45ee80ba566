// A tensor's value in host memory, in its storage dtype: what programs take and return.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "dsl/dtype.h"
#include "dsl/shape.h"

namespace towerjit {

struct HostTensor {
  Shape shape;  // concrete
  DType dtype = DType::f32;
  std::vector<float> f32;    // the elements when dtype is f32
  std::vector<int32_t> i32;  // the elements when dtype is i32

  HostTensor() = default;
  HostTensor(Shape s, DType t = DType::f32) : shape(std::move(s)), dtype(t) {
    (t == DType::f32 ? f32.resize(shape.elements(0)) : i32.resize(shape.elements(0)));
  }
  int64_t size() const { return shape.elements(0); }
  void* data() { return dtype == DType::f32 ? static_cast<void*>(f32.data()) : i32.data(); }
  const void* data() const { return dtype == DType::f32 ? static_cast<const void*>(f32.data()) : i32.data(); }
};

// Rows [start, start + rows) of a tensor whose first dimension is the batch: a tower's slice.
inline HostTensor rows_of(const HostTensor& t, int64_t start, int64_t rows) {
  Shape shape = t.shape;
  shape[0] = rows;
  HostTensor part(shape, t.dtype);
  const int64_t row = t.shape[0] ? t.size() / t.shape[0] : 0;
  if (rows * row > 0)
    std::memcpy(part.data(), static_cast<const char*>(t.data()) + start * row * 4, rows * row * 4);
  return part;
}

// An f32 scalar holding `v` (a weight or scale fed to a program).
inline HostTensor scalar(double v) {
  HostTensor t(Shape{});
  t.f32[0] = static_cast<float>(v);
  return t;
}

// Inputs of a program by name ("image", "label"), and variables by name ("fc1/kernel").
using HostFeeds = std::map<std::string, HostTensor>;
using HostVariables = std::map<std::string, HostTensor>;

}  // namespace towerjit
