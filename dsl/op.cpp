#include "dsl/op.h"

namespace towerjit {

std::string_view op_name(Op op) {
  switch (op) {
#define X(name, text, kind) \
  case Op::name:            \
    return text;
#include "dsl/ops.def"
#undef X
  }
  return "?";
}

OpKind op_kind(Op op) {
  switch (op) {
#define X(name, text, kind) \
  case Op::name:            \
    return OpKind::kind;
#include "dsl/ops.def"
#undef X
  }
  return OpKind::Special;
}

bool op_is_comparison(Op op) {
  switch (op) {
    case Op::Less: case Op::LessEqual: case Op::Greater: case Op::GreaterEqual:
    case Op::Equal: case Op::NotEqual:
      return true;
    default:
      return false;
  }
}

}  // namespace towerjit
