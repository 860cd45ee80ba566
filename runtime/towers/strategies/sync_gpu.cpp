// Synchronous towers that are all GPUs, with the variables kept on the GPUs
// (TOWERJIT_GPU_VARIABLES=on): one copy per GPU, the reduction (in-device sums, NCCL between
// GPUs, MPI between processes, in 16 bits with gradient compression; a sparse gradient's rows concatenated on the host) and the apply
// on the GPUs (runtime/towers/gpu_resident_sync.h);
// the host copy is a cache refreshed when asked for.
#include <algorithm>

#include "dsl/error.h"
#include "runtime/towers/gpu_resident_sync.h"
#include "runtime/towers/tower_strategy.h"

namespace towerjit::detail {
namespace {

class SyncGpu final : public TowerStrategy {
 public:
  SyncGpu(TowerState& state, Loc loc) : TowerStrategy(state), host_(state.compiled.initial) {
    const CompiledTowers& c = state.compiled;
    GpuResidentSync::Setup setup{.apply_graph = &c.apply_side->graph, .apply_fetches = c.apply_fetches,
                                 .apply_updates = c.apply_updates, .gradient_inputs = c.gradient_inputs,
                                 .gradient_scale = TowerProgram::gradient_scale, .world = state.world,
                                 .bucket_mb = state.options.bucket_mb,
                                 .compression = state.options.gradient_compression};
    for (const auto& p : c.tower_step) setup.towers.push_back(p->cuda());
    for (const auto& u : c.model_updates) setup.model_update_variables.push_back(u.variable);
    for (const auto& k : c.sparse) setup.sparse.push_back({k.variable, k.rows_input});
    gpus_ = std::make_unique<GpuResidentSync>(setup, host_, loc);
  }

  StepResult step(const HostFeeds& batch, int64_t whole_batch, Loc loc) override {
    const BatchSplit split = split_step_batch(batch, whole_batch, state_.towers, state_.layout, loc);
    StepResult result;
    result.slices = split.slices;
    const std::vector<double> shares = split.own_shares();
    const int64_t applies = state_.applies;
    report::Trace::Span span = state_.traced("step on the GPUs", "compute", kReduceRow);
    const GpuResidentSync::Result r = gpus_->step(
        split.feeds, split.own_weights(), shares, [&](int t) { return random_key(applies, split.first + t); },
        [&](int count, const std::function<void(int)>& body) { state_.on_tower_threads(count, body); });
    span.end();
    host_stale_ = true;
    ++state_.applies;
    result.learning_rate = state_.applied(r.apply_fetched);
    for (size_t t = 0; t < r.losses.size(); ++t) result.loss += shares[t] * r.losses[t];
    state_.world->all_reduce_sum(&result.loss, 1);  // the other processes' towers' share (errors: the transport's)
    return result;
  }

  HostVariables& variables() override {
    if (host_stale_) gpus_->download(host_);
    host_stale_ = false;
    return host_;
  }
  void restore(const HostVariables& values) override {
    host_ = values;
    gpus_->upload(values);
    host_stale_ = false;
  }
  std::map<std::string, std::vector<Device>> variable_devices() const override {
    std::vector<Device> gpus;
    for (const Device& d : state_.towers.devices())
      if (std::find(gpus.begin(), gpus.end(), d) == gpus.end()) gpus.push_back(d);
    std::map<std::string, std::vector<Device>> out;
    for (const auto& [name, value] : host_) out[name] = gpus;
    return out;
  }
  void list_programs(const AddProgram& add) const override {
    for (const CudaProgram* p : gpus_->programs())
      add(p->name(),
          p->name().starts_with("apply")   ? "once per step per copy of the variables, on the reduced gradients"
          : p->name().starts_with("widen") ? "on each GPU, the compressed all-reduce's totals widened to f32"
                                           : "on each GPU, summing its towers' or the GPUs' values",
          p->lowered_graph(), p->program());
  }
  void name_trace_rows(report::Trace& trace) const override { trace.name_thread(kApplyRow, "apply"); }

 private:
  HostVariables host_;
  bool host_stale_ = false;  // host_ lags the GPUs' copies
  std::unique_ptr<GpuResidentSync> gpus_;
};

}  // namespace

std::unique_ptr<TowerStrategy> make_sync_gpu(TowerState& state, Loc loc) {
  return std::make_unique<SyncGpu>(state, loc);
}

}  // namespace towerjit::detail
