// Async GPU towers with each variable on one GPU (runtime/towers/variable_homes.h): the seed's
// AsyncMultiGPUBuilder with fewer than 4 towers. A tower reads every variable into its own
// copy under the apply lock, so it reads them as they were between two applies; computes its
// gradients on its GPU, where they stay; and under the apply lock applies them one variable at
// a time, each on its variable's GPU (a sparse gradient as its rows and values), then writes
// the model's updates. Only the loss and the learning rate cross to the host in a step.
#include "dsl/error.h"
#include "runtime/towers/async_variables.h"
#include "runtime/towers/tower_state.h"
#include "runtime/towers/variable_homes.h"

namespace towerjit::detail {
namespace {

class PlacedVariables final : public AsyncVariables {
 public:
  PlacedVariables(TowerState& state, Loc loc)
      : state_(state), loc_(loc), homes_(state, loc), fetched_(static_cast<size_t>(state.towers.size())) {}

  Read compute(int t, const HostFeeds& feeds) override {
    int64_t read_at = 0;
    DeviceVariables* reads = nullptr;
    {
      std::lock_guard lock(state_.apply_mutex);
      read_at = state_.applies;
      reads = &homes_.read(t);
    }
    CudaProgram& program = *state_.compiled.tower_step[t]->cuda();
    fetched_[t] = program.run_to_device(feeds, *reads, random_key(read_at, t), loc_);
    return {to_host(fetched_[t][0], program.stream()).f32[0], read_at};
  }

  double apply(int t, double scale) override {
    const std::vector<DeviceTensor>& out = fetched_[t];  // the loss, the gradients, the model's updates
    const auto step = static_cast<uint64_t>(state_.applies.load());
    const CompiledTowers& c = state_.compiled;
    const size_t gradients = homes_.split().variables.size(), updates = c.model_updates.size();
    homes_.begin_apply();
    for (size_t v = 0; v < gradients; ++v) {
      const int k = c.sparse_of(v);  // a sparse gradient's rows: fetched after the model's updates
      homes_.apply(v, out[1 + v], k >= 0 ? &out[1 + gradients + updates + k] : nullptr, scale, step);
    }
    for (size_t u = 0; u < updates; ++u) homes_.write_update(u, out[1 + gradients + u]);
    return homes_.finish_apply(step);
  }

  HostVariables& host() override {
    std::lock_guard lock(state_.apply_mutex);
    return homes_.host(state_.applies);
  }
  void restore(const HostVariables& values) override {
    std::lock_guard lock(state_.apply_mutex);
    homes_.restore(values);
  }
  std::map<std::string, std::vector<Device>> devices() const override { return homes_.devices(); }
  void list_programs(const TowerStrategy::AddProgram& add) const override { homes_.list_programs(add); }

 private:
  TowerState& state_;
  const Loc loc_;
  VariableHomes homes_;
  std::vector<std::vector<DeviceTensor>> fetched_;  // per tower: its last step's outputs (views), until its apply
};

}  // namespace

std::unique_ptr<AsyncVariables> placed_async_variables(TowerState& state, Loc loc) {
  return std::make_unique<PlacedVariables>(state, loc);
}

}  // namespace towerjit::detail
