// The variables of async towers in host memory: one copy, one CPU apply of every variable
// (the seed's placement with 4 or more towers, and the only one for CPU towers).
#include "runtime/towers/async_variables.h"

#include "runtime/cpu/relaxed_copy.h"
#include "runtime/towers/tower_state.h"

namespace towerjit::detail {
namespace {

class HostAsyncVariables final : public AsyncVariables {
 public:
  explicit HostAsyncVariables(TowerState& state)
      : state_(state), values_(state.compiled.initial), apply_(state.compiled.make_apply()),
        kept_(static_cast<size_t>(state.towers.size())) {}

  Read compute(int tower, const HostFeeds& feeds) override {
    const int64_t read_at = state_.applies;
    kept_[tower] = state_.run_tower(tower, feeds, values_, random_key(read_at, tower));
    return {kept_[tower].loss(), read_at};
  }

  double apply(int tower, double scale) override {
    TowerOutputs& out = kept_[tower];
    HostFeeds gradients;
    const CompiledTowers& c = state_.compiled;
    for (size_t v = 0; v < c.gradient_inputs.size(); ++v) gradients[c.gradient_inputs[v]] = std::move(out.gradient(v));
    // A sparse gradient's values reach the apply as they are (no all_reduce to scale them), so
    // they take the tower's factor here, rounded once as the sync concatenation weighs them.
    for (size_t k = 0; k < c.sparse.size(); ++k) {
      for (float& x : gradients[c.gradient_inputs[c.sparse[k].variable]].f32) x = static_cast<float>(scale * x);
      gradients[c.sparse[k].rows_input] = std::move(out.rows(k));
    }
    gradients[TowerProgram::gradient_scale] = scalar(scale);
    const double rate = state_.applied(apply_->run(gradients, values_, static_cast<uint64_t>(state_.applies.load())));
    // Copied into the variables' buffers rather than swapped for them, as relaxed words: another
    // tower's step may be reading them now (the seed's towers read the variables as they are,
    // unlocked; runtime/cpu/relaxed_copy.h).
    const auto& updates = state_.compiled.model_updates;
    for (size_t u = 0; u < updates.size(); ++u) {
      HostTensor& into = values_.at(updates[u].variable);
      cpujit::copy_relaxed(into.data(), out.update(u).data(), static_cast<size_t>(into.size()) * dtype_bytes(into.dtype));
    }
    return rate;
  }

  HostVariables& host() override { return values_; }
  void restore(const HostVariables& values) override { values_ = values; }
  std::map<std::string, std::vector<Device>> devices() const override {
    std::map<std::string, std::vector<Device>> out;
    for (const auto& [name, value] : values_) out[name] = {cpu(0)};
    return out;
  }
  void list_programs(const TowerStrategy::AddProgram& add) const override {
    add(apply_->name(), "after each tower's step, on its own gradients", apply_->lowered_graph(), apply_->program());
  }

 private:
  TowerState& state_;
  HostVariables values_;
  std::unique_ptr<CpuProgram> apply_;
  std::vector<TowerOutputs> kept_;  // per tower: its last step's outputs, until its apply
};

}  // namespace

std::unique_ptr<AsyncVariables> host_async_variables(TowerState& state) {
  return std::make_unique<HostAsyncVariables>(state);
}

}  // namespace towerjit::detail
