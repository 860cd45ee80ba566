#include "runtime/towers/tower_strategy.h"

#include "dsl/error.h"

namespace towerjit::detail {

void TowerStrategy::no_accumulation(int micro, Loc loc) {
  user_check(false, loc)
      << "step: accumulating over " << micro << " micro-batches needs SyncAverage towers in one process with the "
      << "variables in host memory (it weighs every example alike, as a step on the whole batch does); async "
      << "towers apply every gradient as it comes and the per-tower reductions weigh towers, not examples (use "
      << "accumulate = 1); with TOWERJIT_GPU_VARIABLES=on the GPUs reduce each step, and across processes it is "
      << "not built yet";
  std::abort();  // not reached: user_check threw
}

std::map<std::string, std::vector<Device>> TowerStrategy::variable_devices() const {
  std::map<std::string, std::vector<Device>> out;
  for (const auto& [name, value] : state_.compiled.initial) out[name] = {cpu(0)};
  return out;
}

TowerStrategy::StepResult TowerStrategy::accumulated_step(const HostFeeds&, int micro, Loc loc) {
  no_accumulation(micro, loc);
}

TowerStrategy::AsyncReport TowerStrategy::run_async(int, const BatchFor&, Loc loc) {
  user_check(false, loc) << "run_async: the towers are declared " << to_string(state_.towers.reduction())
                         << "; declare them with .reduce(AsyncApply{}) to run them free";
  std::abort();  // not reached
}

}  // namespace towerjit::detail
