#include "dsl/towers.h"

#include <algorithm>
#include <sstream>

#include "dsl/error.h"

namespace towerjit {

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

std::string join(const std::vector<int64_t>& v) {
  std::ostringstream out;
  for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
  return out.str();
}

}  // namespace

bool is_async(const Reduction& reduction) {
  return std::holds_alternative<AsyncApply>(reduction);
}

bool weighs_examples(const Reduction& reduction) {
  return std::holds_alternative<SyncAverage>(reduction);
}

std::string to_string(Split split) {
  return split == Split::remainder_last ? "remainder_last" : "balanced";
}

std::string to_string(SyncVariant variant) {
  return variant == SyncVariant::replicated ? "replicated" : "parameter_server";
}

std::string to_string(const Reduction& reduction) {
  return std::visit(
      Overloaded{
          [](const SyncAverage&) -> std::string { return "sync_average"; },
          [](const SyncPerTowerMean&) -> std::string { return "sync_per_tower_mean"; },
          [](const SyncSum&) -> std::string { return "sync_sum"; },
          [](const AsyncApply& a) -> std::string {
            return std::string("async_apply(scale_gradient=") +
                   (a.scale_gradient ? "true" : "false") + ", max_staleness=" +
                   (a.max_staleness ? std::to_string(*a.max_staleness) : "none") + ")";
          },
      },
      reduction);
}

std::vector<int64_t> split_batch(int64_t batch, int towers, Split policy, Loc loc) {
  user_check(towers >= 1, loc) << "split_batch: " << towers << " towers for a batch of "
                               << batch << "; a strategy needs at least one tower, "
                               << "e.g. Towers{cpu(0)}";
  user_check(batch >= 1, loc) << "split_batch: a batch of " << count_of(batch, "example") << " over "
                              << count_of(towers, "tower") << "; a batch needs at least one example";
  user_check(towers <= batch, loc)
      << "more towers than examples in a batch: " << count_of(towers, "tower") << " for a batch of "
      << count_of(batch, "example") << " would leave " << towers - batch << " of them with 0 examples; "
      << "use a batch of at least " << count_of(towers, "example") << " or at most " << count_of(batch, "tower");
  const int64_t n = towers;
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (policy == Split::remainder_last) {
    const int64_t each = batch / n;
    std::fill(out.begin(), out.end() - 1, each);
    out.back() = batch - each * (n - 1);
  } else {
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = batch / n + (i < batch % n);
  }
  for (int64_t s : out) internal_check(s >= 1);
  return out;
}

std::vector<double> reduction_weights(const std::vector<int64_t>& slices,
                                      const Reduction& reduction, Loc loc) {
  user_check(!slices.empty(), loc) << "reduction_weights: no tower slices; "
                                   << "pass one slice size per tower, e.g. split_batch(...)";
  int64_t total = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    user_check(slices[i] >= 1, loc) << "reduction_weights: tower " << i << " has a slice of "
                                    << slices[i] << " examples (slices " << join(slices)
                                    << "); every tower needs at least one example";
    total += slices[i];
  }
  const double n = static_cast<double>(slices.size());
  std::vector<double> out;
  for (int64_t s : slices) {
    out.push_back(std::visit(
        Overloaded{
            [&](const SyncAverage&) { return static_cast<double>(s) / static_cast<double>(total); },
            [&](const SyncPerTowerMean&) { return 1.0 / n; },
            [&](const SyncSum&) { return 1.0; },
            [&](const AsyncApply& a) { return a.scale_gradient && n > 1 ? 1.0 / n : 1.0; },
        },
        reduction));
  }
  return out;
}

// The seed: ps_device = cpu if len(towers) >= 4.
bool places_variables_on_cpu(size_t towers) { return towers >= 4; }

std::vector<Device> place_variables(const std::vector<int64_t>& variable_bytes,
                                    const std::vector<Device>& towers,
                                    const std::map<int, Device>& overrides, Loc loc) {
  user_check(!towers.empty(), loc) << "place_variables: no towers for "
                                   << variable_bytes.size() << " variables; "
                                   << "give at least one tower device, e.g. {cpu(0)}";
  const int count = static_cast<int>(variable_bytes.size());
  for (const auto& [index, device] : overrides)
    user_check(index >= 0 && index < count, loc)
        << "place_variables: an override for variable " << index << " (to " << device.str()
        << "), but there are " << count << " variables; use an index from 0 to " << count - 1;
  for (int i = 0; i < count; ++i)
    user_check(variable_bytes[static_cast<size_t>(i)] >= 0, loc)
        << "place_variables: variable " << i << " has " << variable_bytes[static_cast<size_t>(i)]
        << " bytes; sizes must be >= 0";

  // The candidates: each tower device once, in order of first appearance.
  std::vector<Device> candidates;
  for (const Device& d : towers)
    if (std::find(candidates.begin(), candidates.end(), d) == candidates.end())
      candidates.push_back(d);
  std::vector<int64_t> load(candidates.size(), 0);
  const bool on_cpu = places_variables_on_cpu(towers.size());

  std::vector<Device> out;
  for (int i = 0; i < count; ++i) {
    if (auto it = overrides.find(i); it != overrides.end()) {
      out.push_back(it->second);  // an explicit device wins and adds to no load
    } else if (on_cpu) {
      out.push_back(Device{DeviceKind::cpu, 0});
    } else {
      // min_element returns the first minimum: ties go to the earliest candidate.
      const size_t best =
          static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      load[best] += variable_bytes[static_cast<size_t>(i)];
      out.push_back(candidates[best]);
    }
  }
  return out;
}

Towers::Towers(std::initializer_list<Device> devices, Loc loc)
    : Towers(std::vector<Device>(devices), loc) {}

Towers::Towers(std::vector<Device> devices, Loc loc) : devices_(std::move(devices)), loc_(loc) {
  user_check(!devices_.empty(), loc) << "Towers: no devices; list one device per tower, "
                                     << "e.g. Towers{cpu(0), cpu(1)} or Towers{gpu(0)}";
}

Towers Towers::split(Split policy) const {
  Towers out = *this;
  out.split_ = policy;
  return out;
}

Towers Towers::reduce(Reduction reduction, Loc loc) const {
  if (const auto* a = std::get_if<AsyncApply>(&reduction)) {
    user_check(!a->max_staleness || *a->max_staleness >= 0, loc)
        << "reduce: AsyncApply with max_staleness " << *a->max_staleness
        << "; use a bound k >= 0 (0: lock-step) or std::nullopt for unbounded staleness";
    user_check(!variant_, loc)
        << "reduce: AsyncApply after variant(" << to_string(*variant_)
        << "); a variant applies only to synchronous reductions (each async tower applies "
        << "by itself); drop the variant() call or use a Sync reduction";
  }
  Towers out = *this;
  out.reduction_ = reduction;
  return out;
}

Towers Towers::variant(SyncVariant variant, Loc loc) const {
  user_check(!is_async(reduction_), loc)
      << "variant(" << to_string(variant) << ") on " << to_string(reduction_)
      << ": a variant applies only to synchronous reductions (each async tower applies by "
      << "itself); drop the variant() call or use SyncAverage, SyncPerTowerMean or SyncSum";
  Towers out = *this;
  out.variant_ = variant;
  return out;
}

Towers Towers::precision(PrecisionPolicy policy, Loc loc) const {
  detail::check_precision_policy(policy, "Towers::precision", loc);
  Towers out = *this;
  out.precision_ = policy;
  return out;
}

VariableSelection variables(std::string pattern, Loc loc) { return {std::move(pattern), loc}; }

bool matches_pattern(const std::string& pattern, const std::string& name) {
  // Iterative glob with one backtrack point: the last '*' and where it stood in `name`.
  size_t p = 0, n = 0, star = std::string::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++, mark = n;
    } else if (star != std::string::npos) {
      p = star + 1, n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

Towers Towers::with(VariableSelection selection, Reduction reduction, Loc loc) const {
  user_check(!selection.pattern.empty(), loc)
      << "with: the variable pattern is empty; name the variables, e.g. variables(\"embed/*\")";
  user_check(is_async(reduction), loc)
      << "with(variables(\"" << selection.pattern << "\"), " << to_string(reduction)
      << "): per-variable rules are built for AsyncApply (the variables it names applied from each tower "
      << "as it comes, the rest reduced as the towers declare); declare the towers' own reduction with "
      << "reduce() instead";
  Towers out = *this;
  out.rules_.push_back({std::move(selection), reduction});
  return out;
}

std::vector<int64_t> Towers::slices(int64_t batch, Loc loc) const {
  return split_batch(batch, size(), split_, loc);
}

std::vector<double> Towers::weights(int64_t batch, Loc loc) const {
  return reduction_weights(slices(batch, loc), reduction_, loc);
}

std::vector<Device> Towers::placement(const std::vector<int64_t>& variable_bytes,
                                      const std::map<int, Device>& overrides, Loc loc) const {
  return place_variables(variable_bytes, devices_, overrides, loc);
}

std::string Towers::str() const {
  std::string out = "Towers{" + towerjit::str(devices_) + "} split=" + to_string(split_) +
                    " reduce=" + to_string(reduction_);
  if (!is_async(reduction_)) out += " variant=" + to_string(sync_variant());
  for (const VariableRule& r : rules_) out += " with(" + r.selection.pattern + ")=" + to_string(r.reduction);
  if (precision_) out += " precision=" + detail::precision_str(*precision_);
  return out;
}

}  // namespace towerjit
