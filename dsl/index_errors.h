// The message of an index out of range in a gather or its gradient, written once so the
// reference interpreter and every backend say the same words. Internal to towerjit.
#pragma once

#include <cstdint>
#include <string>

#include "dsl/node.h"

namespace towerjit::detail {

// "gather: index 300 at [1,4] of input "ids" is out of range [0, 256) in "embed"; ...":
// `flat` is the index's row-major position in `indices` (its shape, bound or with B as its
// first axis), `rows` the size of the table's gathered axis.
std::string gather_index_error(const Node& node, int64_t value, int64_t flat, const Shape& indices,
                               int64_t rows);

}  // namespace towerjit::detail
