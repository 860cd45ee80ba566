// Element types. f32 for values, i32 for labels and indices; the enum leaves room for bf16/f16
// storage (computed in f32) without touching the ops.
#pragma once

#include <string_view>

namespace towerjit {

enum class DType { f32, i32 };

constexpr std::string_view dtype_name(DType t) { return t == DType::f32 ? "f32" : "i32"; }
constexpr int dtype_bytes(DType) { return 4; }

}  // namespace towerjit
