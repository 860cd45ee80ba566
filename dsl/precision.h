// A precision policy: which dtype matrix products take their operands in. Declared on a
// Towers value (Towers::precision), so two trainers in one process can differ, or process-wide
// (set_precision_policy in jit/passes/half_matmuls.h) as the default a Towers without one uses.
#pragma once

#include "dsl/dtype.h"

namespace towerjit {

// matmul_operands f32 (the default) leaves graphs as they are; bf16 or f16 rounds each f32
// product's operands to it and accumulates in f32 (variables stay f32 masters; reductions,
// losses and the optimiser's apply stay f32).
struct PrecisionPolicy {
  DType matmul_operands = DType::f32;
};

}  // namespace towerjit
