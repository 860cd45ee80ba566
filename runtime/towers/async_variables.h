// Where async towers in one process keep the variables, and how a tower's step reads them and
// applies its gradients there. The strategy (strategies/async_local.cpp) decides when a tower
// reads and applies; this decides where:
//  - host_async_variables: one copy in host memory, one CPU apply of every variable;
//  - placed_async_variables: each variable on one GPU, chosen by the seed's rule
//    (dsl/towers.h place_variables), with an apply of its own there (placed_variables.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/towers/tower_strategy.h"

namespace towerjit::detail {

class AsyncVariables {
 public:
  virtual ~AsyncVariables() = default;

  struct Read {
    double loss = 0;
    int64_t read_at = 0;  // the applies made before the tower read the variables
  };
  // Tower `tower`'s forward and backward on `feeds` from the variables as they are now; keeps
  // its gradients and model updates for apply(). Towers call this at once, without the lock.
  virtual Read compute(int tower, const HostFeeds& feeds) = 0;
  // Under TowerState::apply_mutex: applies tower `tower`'s kept gradients times `scale` as the
  // apply numbered state.applies, and writes the model's updates from its values. Returns the
  // learning rate the apply used.
  virtual double apply(int tower, double scale) = 0;

  virtual HostVariables& host() = 0;  // every variable, refreshed
  virtual void restore(const HostVariables& values) = 0;
  // The devices holding each variable (TowerTrainer::variable_devices).
  virtual std::map<std::string, std::vector<Device>> devices() const = 0;
  virtual void list_programs(const TowerStrategy::AddProgram& add) const = 0;
};

std::unique_ptr<AsyncVariables> host_async_variables(TowerState& state);
// Errors (at `loc`): an apply that cannot be cut by variable (runtime/towers/apply_by_variable.h).
std::unique_ptr<AsyncVariables> placed_async_variables(TowerState& state, Loc loc);

}  // namespace towerjit::detail
