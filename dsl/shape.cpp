#include "dsl/shape.h"

#include <algorithm>

namespace towerjit {

bool Shape::has_batch() const {
  return std::find(dims_.begin(), dims_.end(), kBatch) != dims_.end();
}

int64_t Shape::static_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= (d == kBatch ? 1 : d);
  return n;
}

int64_t Shape::elements(int64_t batch) const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= (d == kBatch ? batch : d);
  return n;
}

Shape Shape::bind(int64_t batch) const {
  Shape s = *this;
  for (int64_t& d : s.dims_)
    if (d == kBatch) d = batch;
  return s;
}

std::string Shape::str() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ",";
    s += dims_[i] == kBatch ? "B" : std::to_string(dims_[i]);
  }
  return s + "]";
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(rank);
  for (int i = 0; i < rank; ++i) {
    const int ia = a.rank() - rank + i, ib = b.rank() - rank + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da == db || db == 1) out[i] = da;
    else if (da == 1) out[i] = db;
    else return std::nullopt;
  }
  return Shape(std::move(out));
}

std::optional<int> normalize_axis(int axis, int rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

}  // namespace towerjit
