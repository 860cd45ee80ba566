// Static shapes with one symbolic dimension: the batch, written B. A graph is built once for
// any batch size, so a tower's uneven slice (7 of 15) runs the same compiled program.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace towerjit {

// The symbolic batch dimension. Every other dimension is a positive constant.
inline constexpr int64_t kBatch = -1;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int axis) const { return dims_[axis]; }
  int64_t& operator[](int axis) { return dims_[axis]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  bool has_batch() const;
  // Product of the constant dimensions (the batch counts as 1).
  int64_t static_elements() const;
  // Number of elements once the batch is known.
  int64_t elements(int64_t batch) const;
  // The concrete shape for a batch size.
  Shape bind(int64_t batch) const;
  bool operator==(const Shape&) const = default;
  std::string str() const;  // "[B,784]"

 private:
  std::vector<int64_t> dims_;
};

// Numpy broadcasting of two shapes (B broadcasts with B and with 1); nullopt if they don't.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// Maps a possibly negative axis into [0, rank); nullopt when out of range.
std::optional<int> normalize_axis(int axis, int rank);

}  // namespace towerjit
