#include "jit/reference/array.h"

#include "dsl/error.h"
#include "jit/reference/eval.h"

namespace towerjit::reference {

std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> strides(shape.rank());
  int64_t stride = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.rank());
  for (int i = shape.rank() - 1; i >= 0; --i) {
    index[i] = flat % shape[i];
    flat /= shape[i];
  }
  return index;
}

int64_t ravel(const std::vector<int64_t>& index, const std::vector<int64_t>& strides) {
  internal_check(index.size() == strides.size()) << index.size() << " vs " << strides.size();
  int64_t flat = 0;
  for (size_t i = 0; i < index.size(); ++i) flat += index[i] * strides[i];
  return flat;
}

int64_t broadcast_index(const Shape& in, const std::vector<int64_t>& out_index) {
  const int offset = static_cast<int>(out_index.size()) - in.rank();
  internal_check(offset >= 0) << "broadcast from rank " << in.rank() << " to "
                              << out_index.size();
  int64_t flat = 0;
  for (int i = 0; i < in.rank(); ++i) flat = flat * in[i] + (in[i] == 1 ? 0 : out_index[offset + i]);
  return flat;
}

Shape leading_dims(const Shape& shape, int count) {
  return Shape(std::vector<int64_t>(shape.dims().begin(), shape.dims().begin() + count));
}

}  // namespace towerjit::reference
