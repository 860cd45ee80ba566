// The facade: compile the programs, pick the strategy from the factory's table, forward.
#include "runtime/towers/tower_trainer.h"

#include <algorithm>
#include <cmath>

#include "dsl/error.h"
#include "dsl/index_errors.h"
#include "dsl/tower_program.h"
#include "jit/passes/half_matmuls.h"
#include "runtime/dist/checked_transport.h"
#include "runtime/dist/world.h"
#include "runtime/towers/batch_split.h"
#include "runtime/towers/non_finite_inputs.h"
#include "runtime/towers/tower_state.h"
#include "runtime/towers/tower_strategy.h"

namespace towerjit {
namespace {

// What every rank of a world must agree on before training together: the model (its graph's
// text, source lines included), the strategy's settings, the optimiser and the options.
std::map<std::string, std::string> trainer_settings(const Graph& graph, const detail::StrategyRequest& request,
                                                    const Optimizer& optimizer, const TowerTrainerOptions& options,
                                                    DType matmul_operands) {
  std::map<std::string, std::string> settings = request.settings();
  settings["model (graph hash)"] = dist::text_hash(graph.str());
  settings["optimizer"] = optimizer.str();
  settings["seed"] = std::to_string(options.seed);
  settings["precision (matmul operands)"] = std::string(dtype_name(matmul_operands));
  settings["ema"] = options.ema ? "decay " + std::to_string(options.ema->decay) : "off";
  return settings;
}

}  // namespace

TowerTrainer::TowerTrainer(Graph& graph, Tensor loss, Towers towers, const Optimizer& optimizer,
                           TowerTrainerOptions options, Loc loc) {
  dist::Transport& world = dist::world(loc);
  const dist::UserCall at(loc);  // a transport failure while building names this call
  const detail::StrategyRequest request = detail::StrategyRequest::of(towers, world, options.strategy);
  const detail::StrategyRow* row = detail::find_strategy(request);
  state_ = std::make_unique<detail::TowerState>(std::move(towers), world, !row || row->runs_towers, loc);
  state_->options = request.options();
  // Every rank checks, before compiling anything, that the others build the same trainer.
  if (world.size() > 1) dist::check_agreement(trainer_settings(graph, request, optimizer, options,
                                                           state_->towers.precision_policy().value_or(precision_policy()).matmul_operands),
                                          loc);
  std::vector<ThreadPool*> pools;
  for (const auto& pool : state_->tower_pools) pools.push_back(pool.get());
  // Every program of this trainer (towers, apply, predict) compiles here, on this thread.
  const ScopedPrecisionPolicy precision(state_->towers.precision_policy());
  state_->compiled = detail::compile_towers(graph, loss, state_->towers, optimizer, options, pools, loc);
  strategy_ = detail::require_strategy(request, loc).make(*state_, loc);
}

TowerTrainer::~TowerTrainer() = default;

const Towers& TowerTrainer::towers() const { return state_->towers; }
const dist::WorldLayout& TowerTrainer::world_layout() const { return state_->layout; }
int64_t TowerTrainer::applies() const { return state_->applies; }
std::optional<TowerTrainer::LossScaleReport> TowerTrainer::loss_scale() const { return state_->loss_scale(); }
HostVariables& TowerTrainer::variables() { return strategy_->variables(); }
Tensor TowerTrainer::inference_logits() const { return state_->compiled.inference_logits; }

std::map<std::string, const HostTensor*> TowerTrainer::last_gradients() const {
  std::map<std::string, const HostTensor*> out;
  const HostFeeds* feeds = strategy_->last_gradients();
  if (feeds == nullptr) return out;
  for (const auto& [name, value] : *feeds)
    if (name.starts_with(TowerProgram::gradient_prefix) && value.dtype == DType::f32)  // not a sparse one's rows
      out[name.substr(TowerProgram::gradient_prefix.size())] = &value;
  return out;
}
std::map<std::string, std::vector<Device>> TowerTrainer::variable_devices() const {
  return strategy_->variable_devices();
}
TowerTrainer::AsyncReport TowerTrainer::async_report() const { return state_->async_report(); }

std::pair<int64_t, int64_t> TowerTrainer::own_rows(int64_t batch, Loc loc) const {
  return detail::rows_of_rank(batch, state_->towers, state_->layout, loc);
}

TowerTrainer::StepResult TowerTrainer::step(const HostFeeds& batch, Loc loc) { return step(batch, {}, loc); }

TowerTrainer::StepResult TowerTrainer::step(const HostFeeds& batch, StepOptions options, Loc loc) {
  const dist::UserCall at(loc);
  user_check(options.accumulate >= 1, loc) << "step: accumulate " << options.accumulate
                                            << " must be at least 1 (1: one apply per batch, as without it)";
  StepResult result;
  try {
    result = options.accumulate > 1 ? strategy_->accumulated_step(batch, options.accumulate, loc)
                                    : strategy_->step(batch, options.whole_batch, loc);
  } catch (const detail::IndexOutOfRange& e) {
    throw e.at_step("step()'s batch (apply " + std::to_string(applies() + 1) + ")");
  }
  if (options.check_loss && !std::isfinite(result.loss)) {
    const std::string bad = first_non_finite_input(batch);
    user_check(false, loc) << "step: the loss is " << (std::isnan(result.loss) ? "NaN" : "infinite") << " at apply "
                           << applies() << "; the variables now hold this step's update; "
                           << (bad.empty() ? "every input of the batch is finite, so the training diverged: lower the "
                                             "learning rate or clip the gradients"
                                           : "the batch's " + bad + ": the data is the cause")
                           << " (step(batch, {.check_loss = false}) returns such a loss instead)";
  }
  return result;
}

TowerTrainer::AsyncReport TowerTrainer::run_async(int steps_per_tower,
                                                  const std::function<HostFeeds(int, int)>& batch_for, Loc loc) {
  const dist::UserCall at(loc);
  return strategy_->run_async(steps_per_tower, batch_for, loc);
}

void TowerTrainer::set_trace(report::Trace* trace) {
  state_->trace = trace;
  if (!trace) return;
  for (int t = 0; t < state_->towers.size(); ++t)
    trace->name_thread(t, "tower " + std::to_string(t) + " (" + state_->towers.devices()[t].str() + ")");
  trace->name_thread(detail::kReduceRow, "all-reduce");
  strategy_->name_trace_rows(*trace);
}

// What to do about any of restore's mismatches: the values must be this model's, all of them.
constexpr const char* kRestoreFix =
    "; restore takes every variable of the model (variables(), or a checkpoint of this model) and no other";

void TowerTrainer::restore(const HostVariables& values, int64_t applies, Loc loc) {
  for (const auto& [name, t] : variables()) {
    auto it = values.find(name);
    user_check(it != values.end(), loc) << "restore: no value for variable \"" << name << "\"" << kRestoreFix;
    user_check(it->second.shape == t.shape && it->second.dtype == t.dtype, loc)
        << "restore: variable \"" << name << "\" is " << dtype_name(t.dtype) << t.shape.str()
        << " in the model but " << dtype_name(it->second.dtype) << it->second.shape.str() << " in the values"
        << kRestoreFix;
  }
  for (const auto& [name, t] : values)
    user_check(variables().count(name) == 1, loc)
        << "restore: \"" << name << "\" is not a variable of the model" << kRestoreFix;
  strategy_->restore(values);
  state_->applies = applies;
}

}  // namespace towerjit
