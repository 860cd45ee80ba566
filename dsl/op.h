// The operation of a graph node, generated from ops.def.
#pragma once

#include <string_view>

namespace towerjit {

enum class OpKind { Leaf, Unary, Binary, Reduce, Layout, Special };

enum class Op {
#define X(name, text, kind) name,
#include "dsl/ops.def"
#undef X
};

std::string_view op_name(Op op);
OpKind op_kind(Op op);
// True for ops whose value is 0 or 1 (comparisons): they pass no gradient.
bool op_is_comparison(Op op);

}  // namespace towerjit
