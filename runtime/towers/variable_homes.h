// Each variable on one GPU, applied there by itself: the seed's placement for towers that are
// all GPUs (tensorpack's AsyncMultiGPUBuilder, and its parameter-server builder with the
// variables on the GPUs). place_variables (dsl/towers.h) puts each of the model's variables, in
// creation order, on the towers' GPU that holds the fewest bytes so far; a variable's optimiser
// slots and EMA shadow live with it; the global step lives in host memory.
//   - read(t): every variable copied from its GPU into tower t's own copy on the tower's GPU
//     (cuMemcpyPeerAsync between two GPUs);
//   - an apply: begin_apply() gives every GPU the global step's value; apply(v, gradient) for
//     each variable copies the gradient to v's GPU and runs v's own apply there, a program of
//     v's update ops alone (apply_by_variable.h); finish_apply() is the part every apply
//     shares, after the variables': the host increments the global step and computes the
//     learning rate.
// The async strategy (placed_variables.cpp) and the sync parameter-server strategy
// (strategies/sync_placed.cpp) use it, each ordering the reads and applies its own way.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_program.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/towers/apply_by_variable.h"
#include "runtime/towers/tower_strategy.h"

namespace towerjit::detail {

class VariableHomes {
 public:
  // Places and uploads `state`'s variables and compiles each one's apply. Errors (at `loc`):
  // an apply that cannot be cut by variable.
  VariableHomes(TowerState& state, Loc loc);
  ~VariableHomes();
  VariableHomes(const VariableHomes&) = delete;
  VariableHomes& operator=(const VariableHomes&) = delete;

  // The trainable variables' applies, in the gradients' order.
  const ApplyByVariable& split() const { return split_; }
  // The GPUs of variable v (in the gradients' order) and of model update u's variable.
  cuda::DeviceContext& home_of_variable(size_t v) const;
  cuda::DeviceContext& home_of_update(size_t u) const;

  // Tower t's copy of every variable its step reads, refreshed from their GPUs.
  DeviceVariables& read(int tower);
  // Before the variables' applies: every GPU's copy of the global step takes its value.
  void begin_apply();
  // Variable v's apply on its GPU of `gradient` (on any GPU) times `scale`; `step` keys random
  // numbers. A sparse gradient (split().variables[v].rows_input set) is its values, with
  // `rows` its rows; a dense one has no rows (null).
  void apply(size_t v, const DeviceTensor& gradient, const DeviceTensor* rows, double scale, uint64_t step);
  // Model update u's variable takes `value` (on any GPU).
  void write_update(size_t u, const DeviceTensor& value);
  // After every variable's apply: the global step's increment. Returns the learning rate.
  double finish_apply(uint64_t step);

  // Every variable in host memory, as of `applies` applies (fetched when that has changed).
  HostVariables& host(int64_t applies);
  void restore(const HostVariables& values);
  std::map<std::string, std::vector<Device>> devices() const;
  void list_programs(const TowerStrategy::AddProgram& add) const;

 private:
  struct Home;
  struct Placed;
  struct Tower;
  int home_index(const Device& device) const;  // -1: none

  TowerState& state_;
  const Loc loc_;
  const ApplyByVariable split_;
  std::vector<std::unique_ptr<Home>> homes_;
  std::map<std::string, int> home_of_;  // every variable but the global step -> its home
  std::vector<Placed> placed_;          // in the gradients' order
  std::vector<Tower> towers_;
  std::unique_ptr<CpuProgram> shared_;  // the global step's increment, fetching the learning rate
  HostVariables step_;                  // the global step (none without one), in host memory
  HostVariables host_;                  // the copy host() refreshes
  int64_t host_at_ = -1;                // the applies host_ holds (-1: none yet)
};

}  // namespace towerjit::detail
