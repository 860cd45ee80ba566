#include "runtime/checkpoint/precision_change.h"

#include "runtime/host_tensor.h"

namespace towerjit {
namespace {

// f32 holds every bf16 and f16 value; f16 and bf16 hold each other's only in part.
bool widens(DType from, DType to) { return to == DType::f32 || from == to; }

}  // namespace

bool PrecisionChange::exact() const { return widens(from, to); }

std::vector<PrecisionChange> convert_precision(Checkpoint& checkpoint, const HostVariables& model) {
  std::vector<PrecisionChange> changes;
  for (auto& [name, stored] : checkpoint.variables) {
    const auto it = model.find(name);
    if (it == model.end()) continue;
    const HostTensor& wanted = it->second;
    if (stored.dtype == wanted.dtype || stored.shape != wanted.shape || !is_real(stored.dtype) ||
        !is_real(wanted.dtype))
      continue;
    HostTensor converted(stored.shape, wanted.dtype);
    for (int64_t i = 0; i < stored.size(); ++i) set_value(converted, i, value_at(stored, i));  // rounds once
    changes.push_back({name, stored.dtype, wanted.dtype});
    stored = std::move(converted);
  }
  return changes;
}

std::string describe(const std::vector<PrecisionChange>& changes) {
  std::string out;
  for (const PrecisionChange& c : changes)
    out += (out.empty() ? "\"" : ", \"") + c.variable + "\" " + std::string(dtype_name(c.from)) + " -> " +
           std::string(dtype_name(c.to)) + (c.exact() ? " (exact)" : " (rounded to nearest even)");
  return out;
}

}  // namespace towerjit
