// Element types. f32 for values, i32 for labels and indices, and two storage types of 16 bits
// computed in f32: bf16 (f32's exponent, 8 significant bits) and f16 (IEEE half: 5 exponent
// bits, 11 significant bits). A value becomes bf16 or f16 only through cast(), an input, a
// constant or a variable, rounded to nearest even (dsl/half_float.h); ops that compute take
// f32, except matmul, which multiplies two bf16 or two f16 operands into an f32 result, and
// the convolutions the precision policy rewrites (jit/passes/half_convolutions.h), whose
// 16-bit operands give a result of their dtype.
#pragma once

#include <optional>
#include <string_view>

namespace towerjit {

enum class DType { f32, i32, bf16, f16 };

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::i32: return "i32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
  }
  return "?";
}
// The dtype dtype_name gives `name`, or nothing ("bf16" -> DType::bf16): for flags and files.
constexpr std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType t : {DType::f32, DType::i32, DType::bf16, DType::f16})
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}
constexpr int dtype_bytes(DType t) { return t == DType::bf16 || t == DType::f16 ? 2 : 4; }
// bf16 or f16: stored in 16 bits, computed in f32.
constexpr bool is_half_float(DType t) { return t == DType::bf16 || t == DType::f16; }
// Real numbers (f32, bf16, f16), not integers.
constexpr bool is_real(DType t) { return t != DType::i32; }

}  // namespace towerjit
