// A tensor's value in host memory, in its storage dtype: what programs take and return.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dsl/dtype.h"
#include "dsl/half_float.h"
#include "dsl/shape.h"

namespace towerjit {

struct HostTensor {
  Shape shape;  // concrete
  DType dtype = DType::f32;
  std::vector<float> f32;    // the elements when dtype is f32
  std::vector<int32_t> i32;  // the elements when dtype is i32
  std::vector<uint16_t> b16;  // the bit patterns when dtype is bf16 or f16 (dsl/half_float.h)

  HostTensor() = default;
  HostTensor(Shape s, DType t = DType::f32) : shape(std::move(s)), dtype(t) {
    const int64_t n = shape.elements(0);
    (t == DType::f32 ? f32.resize(n) : t == DType::i32 ? i32.resize(n) : b16.resize(n));
  }
  int64_t size() const { return shape.elements(0); }
  int64_t bytes() const { return size() * dtype_bytes(dtype); }
  void* data() { return const_cast<void*>(std::as_const(*this).data()); }
  const void* data() const {
    if (dtype == DType::f32) return f32.data();
    return dtype == DType::i32 ? static_cast<const void*>(i32.data()) : b16.data();
  }
};

// Element i as a number, whatever the dtype.
inline double value_at(const HostTensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::f32: return t.f32[i];
    case DType::i32: return t.i32[i];
    default: return half_value(t.b16[i], t.dtype);
  }
}

// Sets element i to `v` as the dtype stores it: rounded to nearest even once (from the double,
// not through f32) for f32, bf16 and f16; truncated for i32.
inline void set_value(HostTensor& t, int64_t i, double v) {
  switch (t.dtype) {
    case DType::f32: t.f32[i] = static_cast<float>(v); break;
    case DType::i32: t.i32[i] = static_cast<int32_t>(v); break;
    default: t.b16[i] = half_bits(v, t.dtype); break;
  }
}

// Rows [start, start + rows) of a tensor whose first dimension is the batch: a tower's slice.
inline HostTensor rows_of(const HostTensor& t, int64_t start, int64_t rows) {
  Shape shape = t.shape;
  shape[0] = rows;
  HostTensor part(shape, t.dtype);
  const int64_t row = t.shape[0] ? t.size() / t.shape[0] : 0;
  if (rows * row > 0)
    std::memcpy(part.data(), static_cast<const char*>(t.data()) + start * row * dtype_bytes(t.dtype),
                rows * row * dtype_bytes(t.dtype));
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
