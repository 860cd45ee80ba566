// The facade: compile the programs, pick the strategy from the factory's table, forward.
#include "runtime/towers/tower_trainer.h"

#include <algorithm>
#include <cmath>

#include "dsl/error.h"
#include "runtime/towers/non_finite_inputs.h"
#include "runtime/towers/tower_state.h"
#include "runtime/towers/tower_strategy.h"

namespace towerjit {
namespace {

// What every rank of a world must agree on before training together: the model (its graph's
// text, source lines included), the strategy's settings, the optimiser and the options.
std::map<std::string, std::string> trainer_settings(const Graph& graph, const detail::StrategyRequest& request,
                                                    const Optimizer& optimizer, const TowerTrainerOptions& options) {
  std::map<std::string, std::string> settings = request.settings();
  settings["model (graph hash)"] = dist::text_hash(graph.str());
  settings["optimizer"] = optimizer.str();
  settings["seed"] = std::to_string(options.seed);
  settings["ema"] = options.ema ? "decay " + std::to_string(options.ema->decay) : "off";
  return settings;
}

}  // namespace

TowerTrainer::TowerTrainer(Graph& graph, Tensor loss, Towers towers, const Optimizer& optimizer,
                           TowerTrainerOptions options, Loc loc) {
  dist::Transport& world = dist::world(loc);
  const detail::StrategyRequest request = detail::StrategyRequest::of(towers, world, options.strategy);
  const detail::StrategyRow* row = detail::find_strategy(request);
  state_ = std::make_unique<detail::TowerState>(std::move(towers), world, !row || row->runs_towers, loc);
  state_->options = request.options();
  // Every rank checks, before compiling anything, that the others build the same trainer.
  if (world.size() > 1) dist::check_agreement(trainer_settings(graph, request, optimizer, options), loc);
  std::vector<ThreadPool*> pools;
  for (const auto& pool : state_->tower_pools) pools.push_back(pool.get());
  state_->compiled = detail::compile_towers(graph, loss, state_->towers, optimizer, options, pools, loc);
  strategy_ = detail::require_strategy(request, loc).make(*state_, loc);
}

TowerTrainer::~TowerTrainer() = default;

const Towers& TowerTrainer::towers() const { return state_->towers; }
const dist::WorldLayout& TowerTrainer::world_layout() const { return state_->layout; }
bool TowerTrainer::async_world() const {
  return is_async(state_->towers.reduction()) && state_->layout.towers_of_rank.size() > 1;
}
bool TowerTrainer::parameter_server_rank() const { return async_world() && state_->layout.rank == 0; }
const std::vector<int>& TowerTrainer::cores_of(int tower) const { return state_->tower_cores.at(tower); }
int64_t TowerTrainer::applies() const { return state_->applies; }
HostVariables& TowerTrainer::variables() { return strategy_->variables(); }

std::map<std::string, const HostTensor*> TowerTrainer::last_gradients() const {
  std::map<std::string, const HostTensor*> out;
  const HostFeeds* feeds = strategy_->last_gradients();
  if (feeds == nullptr) return out;
  for (const auto& [name, value] : *feeds)
    if (name.starts_with(TowerProgram::gradient_prefix)) out[name.substr(TowerProgram::gradient_prefix.size())] = &value;
  return out;
}
std::map<std::string, std::vector<Device>> TowerTrainer::variable_devices() const {
  return strategy_->variable_devices();
}
TowerTrainer::AsyncReport TowerTrainer::async_report() const { return state_->async_report(); }

std::pair<int64_t, int64_t> TowerTrainer::own_rows(int64_t batch, Loc loc) const {
  return detail::rows_of_rank(batch, state_->towers, state_->layout, loc);
}

std::vector<HostFeeds> TowerTrainer::slice_batch(const HostFeeds& batch, const std::vector<int64_t>& slices,
                                                 Loc loc) const {
  return detail::cut_batch(batch, slices, loc);
}

TowerTrainer::StepResult TowerTrainer::step(const HostFeeds& batch, Loc loc) { return step(batch, {}, loc); }

TowerTrainer::StepResult TowerTrainer::step(const HostFeeds& batch, StepOptions options, Loc loc) {
  user_check(options.accumulate >= 1, loc) << "step: accumulate " << options.accumulate
                                            << " must be at least 1 (1: one apply per batch, as without it)";
  StepResult result = options.accumulate > 1 ? strategy_->accumulated_step(batch, options.accumulate, loc)
                                             : strategy_->step(batch, options.whole_batch, loc);
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
  return strategy_->run_async(steps_per_tower, batch_for, loc);
}

std::vector<TowerTrainer::ProgramView> TowerTrainer::programs() const {
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
  const detail::CompiledTowers& c = state_->compiled;
  add(c.tower_step.front()->name(), "every tower, on its slice of each batch: the loss and the gradients",
      c.tower_step.front()->lowered_graph(), c.tower_step.front()->program());
  strategy_->list_programs(add);
  if (!c.predict.empty())
    add(c.predict[0]->name(), "predict() and evaluate(), on every tower's slice, in inference",
        c.predict[0]->lowered_graph(), c.predict[0]->program());
  return out;
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
