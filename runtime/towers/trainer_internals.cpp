// The trainer's internals that towerjit's own code and tests read (trainer_internals.h).
#include "runtime/towers/trainer_internals.h"

#include <algorithm>
#include <map>

#include "runtime/towers/tower_state.h"
#include "runtime/towers/tower_strategy.h"

namespace towerjit::detail {

bool async_world(const TowerTrainer& trainer) {
  const TowerState& state = TrainerAccess::state(trainer);
  return is_async(state.towers.reduction()) && state.layout.towers_of_rank.size() > 1;
}

bool parameter_server_rank(const TowerTrainer& trainer) {
  return async_world(trainer) && TrainerAccess::state(trainer).layout.rank == 0;
}

const std::vector<int>& cores_of(const TowerTrainer& trainer, int tower) {
  return TrainerAccess::state(trainer).tower_cores.at(tower);
}

std::vector<ProgramView> programs(const TowerTrainer& trainer) {
  // Named by role within this trainer: a program's dump stem may carry a suffix other trainers
  // of the process caused (tower_step_2), and the towers' copies of one program are one.
  std::vector<ProgramView> out;
  std::vector<const kir::Program*> seen;
  std::map<std::string, int> per_role;
  auto add = [&](const std::string& stem, const std::string& runs, const Graph& g, const kir::Program& p) {
    if (std::find(seen.begin(), seen.end(), &p) != seen.end()) return;
    seen.push_back(&p);
    std::string role = stem;
    if (const size_t cut = stem.find_last_of('_'); cut != std::string::npos && cut + 1 < stem.size() &&
        stem.find_first_not_of("0123456789", cut + 1) == std::string::npos)
      role = stem.substr(0, cut);
    const int n = ++per_role[role];
    out.push_back({n == 1 ? role : role + "_" + std::to_string(n), runs, &g, &p});
  };
  const CompiledTowers& c = TrainerAccess::state(trainer).compiled;
  add(c.tower_step.front()->name(), "every tower, on its slice of each batch: the loss and the gradients",
      c.tower_step.front()->lowered_graph(), c.tower_step.front()->program());
  TrainerAccess::strategy(trainer).list_programs(add);
  if (!c.predict.empty())
    add(c.predict[0]->name(), "predict() and evaluate(), on every tower's slice, in inference",
        c.predict[0]->lowered_graph(), c.predict[0]->program());
  return out;
}

}  // namespace towerjit::detail
