#include "dsl/precision.h"

#include "dsl/error.h"

namespace towerjit::detail {

void check_precision_policy(const PrecisionPolicy& p, const char* who, Loc loc) {
  user_check(p.matmul_operands == DType::f32 || is_half_float(p.matmul_operands), loc)
      << who << ": matrix products cannot take their operands in " << dtype_name(p.matmul_operands)
      << "; set matmul_operands to DType::f32, DType::bf16 or DType::f16";
  user_check(p.convolutions() == DType::f32 || is_half_float(p.convolutions()), loc)
      << who << ": convolutions cannot take their operands in " << dtype_name(p.convolutions())
      << "; set conv_operands to DType::f32, DType::bf16 or DType::f16";
}

std::string precision_str(const PrecisionPolicy& p) {
  if (p.matmul_operands == p.convolutions()) return std::string(dtype_name(p.matmul_operands));
  return "matmul " + std::string(dtype_name(p.matmul_operands)) + ", conv " + std::string(dtype_name(p.convolutions()));
}

}  // namespace towerjit::detail
