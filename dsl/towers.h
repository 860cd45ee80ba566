// Declaring a tower strategy: which devices run a replica of the model, how a batch is split
// over them, and how their gradients reach the shared variables. Plain values and pure
// functions; running towers (the trainer, CPU worker threads, NCCL) is the runtime's job.
//
//   auto towers = Towers{cpu(0), cpu(1)}
//                     .split(Split::remainder_last)
//                     .reduce(SyncAverage{});       // or AsyncApply{.scale_gradient = true}
//
// Every tower computes g_i, the gradient of its loss, a mean over its n_i examples
// (B = sum n_i examples in the batch, N towers). The reduction decides what is applied:
//   SyncAverage       g = sum_i (n_i / B) g_i   -- the full-batch gradient: N towers compute
//                                                 the step one tower computes on the batch
//   SyncPerTowerMean  g = (1 / N) sum_i g_i     -- the seed's average of tower means; equals
//                                                 SyncAverage only when the split is even
//   SyncSum           g = sum_i g_i
//   AsyncApply        each tower applies s * g_i itself, with no barrier;
//                     s = 1/N when scale_gradient and N > 1, else 1 (tensorpack's rule)
// See docs/strategies.md.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "dsl/devices.h"
#include "dsl/precision.h"

namespace towerjit {

// How a batch of B examples is cut into N slices (in tower order).
enum class Split {
  // The seed's: B / N (rounded down) on towers 0..N-2, the rest B - (B/N)(N-1) on the last.
  // 15 over 2 -> 7, 8; 64 over 3 -> 21, 21, 22; 10 over 4 -> 2, 2, 2, 4.
  remainder_last,
  // Sizes differ by at most one; the first B mod N towers take one more.
  // 64 over 3 -> 22, 21, 21; 10 over 4 -> 3, 3, 2, 2.
  balanced,
};

// Synchronous: one apply per step of the slice-size-weighted mean of the towers' gradients
// (the default).
struct SyncAverage {};
// Synchronous: one apply of the plain mean of the towers' mean gradients (the seed's formula).
struct SyncPerTowerMean {};
// Synchronous: one apply of the sum of the towers' gradients.
struct SyncSum {};
// Asynchronous: every tower applies its own gradient to the shared variables, no barrier.
struct AsyncApply {
  bool scale_gradient = true;                  // multiply by 1/N when N > 1, as the seed does
  std::optional<int64_t> max_staleness = std::nullopt;  // k: a tower more than k applies ahead
                                                        // of the slowest waits; none: unbounded
};
using Reduction = std::variant<SyncAverage, SyncPerTowerMean, SyncSum, AsyncApply>;

// Where the reduction of a synchronous strategy happens.
enum class SyncVariant {
  replicated,        // every device holds the variables; all-reduce, every device applies
  // one copy: reduce onto the variables' device, apply, every tower reads it; on GPU towers
  // with TowerStrategyOptions::gpu_variables, each variable on its own GPU (place_variables)
  parameter_server,
};

bool is_async(const Reduction& reduction);
// Whether the reduction weighs every example alike (SyncAverage's n_i / B): then any cut of a
// batch into slices, or micro-batches, applies the same gradient.
bool weighs_examples(const Reduction& reduction);
std::string to_string(Split split);
std::string to_string(SyncVariant variant);
std::string to_string(const Reduction& reduction);  // "sync_average", "async_apply(...)", ...

// The slice sizes of a batch of `batch` examples over `towers` towers (they add up to batch,
// none is 0). Errors: towers < 1, batch < 1, more towers than examples.
std::vector<int64_t> split_batch(int64_t batch, int towers, Split policy,
                                 Loc loc = Loc::current());

// The factor each tower's gradient is multiplied by, for slices `slices` (see the table at the
// top): SyncAverage n_i / B, SyncPerTowerMean 1 / N, SyncSum 1, AsyncApply 1 / N when
// scale_gradient and N > 1, else 1. Errors: no slices, a slice < 1.
std::vector<double> reduction_weights(const std::vector<int64_t>& slices,
                                      const Reduction& reduction, Loc loc = Loc::current());

// The device of each variable (sizes in bytes, in creation order) for async apply and the
// parameter-server variant, by tensorpack's AsyncMultiGPUBuilder rule:
//  - 4 or more towers (counting every tower, also several on one device): all on cpu(0);
//  - otherwise each variable, in order, goes to the tower device that holds the fewest bytes
//    so far (ties: the device that appears first among the towers). A device listed for
//    several towers is one candidate with one load (the seed would count it once per tower).
// `overrides` (variable index -> device) win and, as in the seed, do not add to any load.
// Errors: no towers, a negative size, an override index out of range.
// The async strategies follow it (docs/strategies.md, "Where async towers' variables live").
// The first half of that rule: whether `towers` towers keep every variable on cpu(0).
bool places_variables_on_cpu(size_t towers);
std::vector<Device> place_variables(const std::vector<int64_t>& variable_bytes,
                                    const std::vector<Device>& towers,
                                    const std::map<int, Device>& overrides = {},
                                    Loc loc = Loc::current());

// Variables by name, for a per-variable reduction (Towers::with): a glob over the trainable
// variables' names, '*' any run of characters ('/' included), '?' any one character.
struct VariableSelection {
  std::string pattern;  // "embed/*"
  Loc loc;              // where it was written, for the trainer's errors
};
VariableSelection variables(std::string pattern, Loc loc = Loc::current());
// Whether `name` matches the glob `pattern`.
bool matches_pattern(const std::string& pattern, const std::string& name);

struct VariableRule {
  VariableSelection selection;
  Reduction reduction;
};

// A strategy: the tower devices (several towers on one device allowed), the split, the
// reduction and, for synchronous reductions, the variant; and per-variable rules that reduce
// some variables otherwise. Builder calls return a new value.
class Towers {
 public:
  Towers(std::initializer_list<Device> devices, Loc loc = Loc::current());
  explicit Towers(std::vector<Device> devices, Loc loc = Loc::current());

  Towers split(Split policy) const;
  // Errors: AsyncApply with a negative max_staleness, or after variant() was set.
  Towers reduce(Reduction reduction, Loc loc = Loc::current()) const;
  // Errors: the reduction is AsyncApply (it has no variant: each tower applies by itself).
  Towers variant(SyncVariant variant, Loc loc = Loc::current()) const;
  // The variables `selection` names are reduced by `reduction` instead of the towers' own
  // (TF's parameter servers plus Horovod in one program: `.with(variables("embed/*"),
  // AsyncApply{})` applies an embedding's sparse gradient from each tower as it comes while
  // the rest is averaged). Built: AsyncApply rules on sync towers, variables in host memory,
  // in one process or several (docs/strategies.md, "Per-variable reductions"); the trainer
  // checks the rules against the model. Errors: a rule that is not AsyncApply, an empty pattern.
  Towers with(VariableSelection selection, Reduction reduction, Loc loc = Loc::current()) const;
  const std::vector<VariableRule>& rules() const { return rules_; }
  // The precision policy this trainer's programs compile under (matmul operands in bf16 or
  // f16, f32 accumulation), whatever the process-wide set_precision_policy says; without
  // it, the process's policy. Errors: matmul_operands neither f32, bf16 nor f16.
  Towers precision(PrecisionPolicy policy, Loc loc = Loc::current()) const;
  const std::optional<PrecisionPolicy>& precision_policy() const { return precision_; }

  int size() const { return static_cast<int>(devices_.size()); }
  const std::vector<Device>& devices() const { return devices_; }
  Split split_policy() const { return split_; }
  const Reduction& reduction() const { return reduction_; }
  SyncVariant sync_variant() const { return variant_.value_or(SyncVariant::replicated); }
  // Where the Towers value was declared, for errors raised later (e.g. by a trainer).
  const Loc& declared_at() const { return loc_; }

  // split_batch / reduction_weights / place_variables for these towers.
  std::vector<int64_t> slices(int64_t batch, Loc loc = Loc::current()) const;
  std::vector<double> weights(int64_t batch, Loc loc = Loc::current()) const;
  std::vector<Device> placement(const std::vector<int64_t>& variable_bytes,
                                const std::map<int, Device>& overrides = {},
                                Loc loc = Loc::current()) const;

  // "Towers{cpu:0,cpu:1} split=remainder_last reduce=sync_average variant=replicated".
  std::string str() const;

 private:
  std::vector<Device> devices_;
  Split split_ = Split::remainder_last;
  Reduction reduction_ = SyncAverage{};
  std::optional<SyncVariant> variant_;
  std::vector<VariableRule> rules_;
  std::optional<PrecisionPolicy> precision_;
  Loc loc_;
};

}  // namespace towerjit
