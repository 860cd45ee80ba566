// What towerjit's own code and tests read of a TowerTrainer beyond its public API: its compiled
// programs, the cores of a tower, whether it is an async world. Not installed (the public API
// is include/towerjit.h); these may change with the runtime.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/towers/tower_trainer.h"

namespace towerjit {

namespace kir {
struct Program;
}

namespace detail {

// The one door into a trainer's private state (a friend of TowerTrainer).
struct TrainerAccess {
  static TowerState& state(const TowerTrainer& trainer) { return *trainer.state_; }
  static TowerStrategy& strategy(const TowerTrainer& trainer) { return *trainer.strategy_; }
};

// Async towers across processes: rank 0 is the parameter server (its towers stay idle), the
// other ranks' towers push to it (runtime/towers/async_world.h; fit() only).
bool async_world(const TowerTrainer& trainer);
bool parameter_server_rank(const TowerTrainer& trainer);

// The cores CPU tower `tower`'s threads run on, pinned unless TOWERJIT_PIN_TOWERS=off (a group
// of the process's cores of its own while there are as many cores as CPU towers); empty for a
// GPU tower.
const std::vector<int>& cores_of(const TowerTrainer& trainer, int tower);

// Each program the trainer compiled, once (the towers' copies of one are alike): the tower
// step, the apply, predict, and with the variables on the GPUs the reductions. Their CUDA:
// dump_cuda (runtime/towers/dump_programs.h).
struct ProgramView {
  std::string name;  // its dump stem: "tower_step", "apply", "predict", "reduce", ...
  std::string runs;  // when it runs, in words
  const Graph* graph = nullptr;  // the optimised graph `program` refers to
  const kir::Program* program = nullptr;
};
std::vector<ProgramView> programs(const TowerTrainer& trainer);

}  // namespace detail
}  // namespace towerjit
