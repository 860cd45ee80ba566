// A checkpoint read into a model that holds some variables in another floating precision (a
// bf16 copy of an f32 run's weights, or the reverse): each such variable converted to the
// model's dtype, widened exactly or rounded to nearest even (dsl/half_float.h). resume_from
// does this by default with a warning naming each variable; CheckpointPrecision::exact
// refuses such a checkpoint instead (check_matches then names the first difference).
#pragma once

#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"

namespace towerjit {

enum class CheckpointPrecision {
  convert,  // read a float variable of another precision into the model's, with a warning
  exact,    // refuse it: the checkpoint's dtypes must be the model's
};

struct PrecisionChange {
  std::string variable;
  DType from, to;
  bool exact() const;  // widened (every value kept) rather than rounded
};

// Converts in place every variable of `checkpoint` whose dtype differs from the model's
// variable of that name and shape, both being f32, bf16 or f16; returns them in name order.
// Everything else (names, shapes, other dtypes) is left for check_matches to judge.
std::vector<PrecisionChange> convert_precision(Checkpoint& checkpoint, const HostVariables& model);

// "\"fc1/kernel\" bf16 -> f32 (exact), \"fc2/kernel\" f32 -> bf16 (rounded to nearest even)".
std::string describe(const std::vector<PrecisionChange>& changes);

}  // namespace towerjit
