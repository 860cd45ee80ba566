// Synchronous towers that are all GPUs, the parameter-server variant with the variables on the
// GPUs (TowerStrategyOptions::gpu_variables): tensorpack's parameter-server builder with the
// variables on the GPUs. Each variable lives on one GPU by the seed's rule
// (runtime/towers/variable_homes.h). A step:
//   1. every tower reads the variables into its copy on its GPU and runs its forward and
//      backward there; its gradients and model updates stay there;
//   2. for each variable, its GPU sums the towers' gradients, each weighted as the reduction
//      says (n_i/B for SyncAverage), in tower order (weighted_sum.h), and applies the sum by
//      itself; the model's updates are averaged into their variables the same way (n_i/B); a
//      sparse gradient's rows and values are copied down, concatenated in tower order on the
//      host (sparse_reduction.h) and copied to its variable's GPU, whose sparse apply combines them;
//   3. the host increments the global step and computes the learning rate.
// Only the losses, the learning rate and the sparse gradients cross to the host; the sums and
// the concatenations are in a fixed order, so a step is deterministic.
#include "dsl/error.h"
#include "runtime/towers/sparse_reduction.h"
#include "runtime/towers/tower_strategy.h"
#include "runtime/towers/variable_homes.h"
#include "runtime/towers/weighted_sum.h"

namespace towerjit::detail {
namespace {

class SyncPlaced final : public TowerStrategy {
 public:
  SyncPlaced(TowerState& state, Loc loc) : TowerStrategy(state), homes_(state, loc) {
    const CompiledTowers& c = state.compiled;
    sparse_.resize(c.gradient_shapes.size());
    for (size_t v = 0; v < c.gradient_shapes.size(); ++v) {
      if (!c.is_sparse(v)) {
        sums_.push_back(sum_on(homes_.home_of_variable(v), c.gradient_shapes[v], false, loc));
        continue;
      }
      sums_.emplace_back();  // none: concatenated instead
      sparse_[v].uploads = std::make_unique<cuda::Stream>(homes_.home_of_variable(v));
    }
    for (size_t u = 0; u < c.model_updates.size(); ++u)
      sums_.push_back(sum_on(homes_.home_of_update(u), c.initial.at(c.model_updates[u].variable).shape, true, loc));
  }

  StepResult step(const HostFeeds& batch, int64_t whole_batch, Loc loc) override {
    const BatchSplit split = split_step_batch(batch, whole_batch, state_.towers, state_.layout, loc);
    const auto step = static_cast<uint64_t>(state_.applies.load());
    std::vector<std::vector<DeviceTensor>> out(split.own);  // per tower: loss, gradients, model updates
    StepResult result;
    result.slices = split.slices;
    const std::vector<double> shares = split.own_shares();
    state_.on_tower_threads(split.own, [&](int t) {
      state_.on_slice(split, t, [&] {
        CudaProgram& program = *state_.compiled.tower_step[t]->cuda();
        out[t] = program.run_to_device(split.feeds[t], homes_.read(t), random_key(state_.applies, split.first + t), loc);
      });
    });
    for (int t = 0; t < split.own; ++t)
      result.loss += shares[t] * to_host(out[t][0], state_.compiled.tower_step[t]->cuda()->stream()).f32[0];
    report::Trace::Span span = state_.traced("sum and apply, per variable", "apply", kApplyRow);
    const std::vector<double> weights = split.own_weights();
    const size_t gradients = state_.compiled.gradient_shapes.size();
    homes_.begin_apply();
    for (size_t k = 0; k < sums_.size(); ++k) {
      if (k < gradients && sparse_[k].uploads) {
        apply_sparse(k, out, weights, step);
        continue;
      }
      const DeviceTensor& sum = sums_[k].of(out, 1 + k, weights, shares, step, loc);
      if (k < gradients) homes_.apply(k, sum, nullptr, 1.0, step);  // the weights are in the sum
      else homes_.write_update(k - gradients, sum);
    }
    result.learning_rate = homes_.finish_apply(step);
    ++state_.applies;
    return result;
  }

  HostVariables& variables() override { return homes_.host(state_.applies); }
  void restore(const HostVariables& values) override { homes_.restore(values); }
  std::map<std::string, std::vector<Device>> variable_devices() const override { return homes_.devices(); }
  void list_programs(const AddProgram& add) const override {
    homes_.list_programs(add);
    for (const Sum& s : sums_)
      if (s.program) {
        add(s.program->name(), "on each variable's GPU, summing the towers' weighted gradients",
            s.program->lowered_graph(), s.program->program());
        return;
      }
  }
  void name_trace_rows(report::Trace& trace) const override { trace.name_thread(kApplyRow, "apply"); }

 private:
  // The towers' weighted sum of one tensor, on its variable's GPU.
  struct Sum {
    std::unique_ptr<CudaProgram> program;
    DeviceFeeds feeds;  // the towers' values and the weights, at the same addresses every step
    std::vector<double> weights;  // the weights in feeds
    DeviceVariables none;

    // The sum of the towers' fetch `fetch`, gradients weighted by `weights`, model updates by `shares`.
    const DeviceTensor& of(const std::vector<std::vector<DeviceTensor>>& out, size_t fetch,
                           const std::vector<double>& gradient_weights, const std::vector<double>& shares,
                           uint64_t step, Loc loc) {
      const cuda::Stream& stream = program->stream();
      for (size_t t = 0; t < out.size(); ++t) {
        const DeviceTensor& from = out[t][fetch];
        DeviceTensor& to = feeds.at(part(static_cast<int>(t), 0));
        cuda::copy_async(to.ptr(), *to.device, from.ptr(), *from.device, from.bytes(), stream);
      }
      std::vector<double> now = gradient_weights;
      now.insert(now.end(), shares.begin(), shares.end());
      if (now != weights)
        for (size_t t = 0; t < out.size(); ++t) {
          upload(scalar(gradient_weights[t]), feeds.at(gradient_weight(static_cast<int>(t))), stream);
          upload(scalar(shares[t]), feeds.at(update_weight(static_cast<int>(t))), stream);
        }
      weights = std::move(now);
      result = program->run_to_device(feeds, none, step, loc);
      return result.at(0);
    }
    std::vector<DeviceTensor> result;
  };

  Sum sum_on(cuda::DeviceContext& gpu, const Shape& shape, bool is_update, Loc loc) const {
    const int n = state_.towers.size();
    Sum s;
    s.program = weighted_sum(n, {shape}, {is_update}, towerjit::gpu(gpu.ordinal()), "reduce", loc);
    for (int t = 0; t < n; ++t) {
      s.feeds.emplace(part(t, 0), empty_device_tensor(gpu, shape, DType::f32));
      s.feeds.emplace(gradient_weight(t), empty_device_tensor(gpu, Shape{}, DType::f32));
      s.feeds.emplace(update_weight(t), empty_device_tensor(gpu, Shape{}, DType::f32));
    }
    return s;
  }

  // Sparse gradient v: every tower's rows and values copied down, concatenated in tower order
  // with the towers' weights, copied to v's GPU and applied there.
  void apply_sparse(size_t v, const std::vector<std::vector<DeviceTensor>>& out, const std::vector<double>& weights,
                    uint64_t step) {
    const CompiledTowers& c = state_.compiled;
    const size_t rows_fetch = 1 + c.gradient_shapes.size() + c.model_updates.size() + c.sparse_of(v);
    std::vector<const cuda::Stream*> streams;
    for (size_t t = 0; t < out.size(); ++t) streams.push_back(&c.tower_step[t]->cuda()->stream());
    const std::vector<HostTensor> all = concatenate_sparse(out, {{1 + v, rows_fetch}}, streams, weights, nullptr);
    Sparse& s = sparse_[v];
    s.values = to_device(all[0], homes_.home_of_variable(v), *s.uploads);
    s.rows = to_device(all[1], homes_.home_of_variable(v), *s.uploads);
    homes_.apply(v, s.values, &s.rows, 1.0, step);  // the weights are in the values
  }

  // Per gradient: a sparse one's upload stream on its variable's GPU (else null), and its
  // concatenated values and rows there, kept until the next step's (the apply reads them).
  struct Sparse {
    std::unique_ptr<cuda::Stream> uploads;
    DeviceTensor values, rows;
  };

  VariableHomes homes_;
  std::vector<Sum> sums_;  // per gradient (none for a sparse one), then per model update
  std::vector<Sparse> sparse_;
};

}  // namespace

std::unique_ptr<TowerStrategy> make_sync_placed(TowerState& state, Loc loc) {
  return std::make_unique<SyncPlaced>(state, loc);
}

}  // namespace towerjit::detail
