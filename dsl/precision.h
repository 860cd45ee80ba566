// A precision policy: which dtype matrix products take their operands in. Declared on a
// Towers value (Towers::precision), so two trainers in one process can differ, or process-wide
// (set_precision_policy in jit/passes/half_matmuls.h) as the default a Towers without one uses.
#pragma once

#include <optional>
#include <source_location>
#include <string>

#include "dsl/dtype.h"

namespace towerjit {

using Loc = std::source_location;

// matmul_operands f32 (the default) leaves graphs as they are; bf16 or f16 rounds each f32
// product's operands to it and accumulates in f32 (variables stay f32 masters; reductions,
// losses and the optimiser's apply stay f32).
struct PrecisionPolicy {
  DType matmul_operands = DType::f32;
  // The same for convolutions (forward, data and filter gradients): bf16 or f16 rounds their
  // operands, which are then multiplied exactly and accumulated in f32, as cuDNN's and
  // oneDNN's 16-bit convolutions do (jit/passes/half_convolutions.h). Unset: matmul_operands
  // (one dtype for both, as torch.autocast has).
  std::optional<DType> conv_operands = std::nullopt;

  DType convolutions() const { return conv_operands.value_or(matmul_operands); }
};

namespace detail {
// Errors (towerjit::Error at `loc`, naming `who`): a dtype other than f32, bf16 or f16.
void check_precision_policy(const PrecisionPolicy& policy, const char* who, Loc loc);
// "bf16", or "matmul bf16, conv f32" when the two differ.
std::string precision_str(const PrecisionPolicy& policy);
}  // namespace detail

}  // namespace towerjit
