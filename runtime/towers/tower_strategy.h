// How towers train: one interface, one implementation a file (runtime/towers/strategies/),
// chosen once by the factory (strategy_factory.cpp), which holds the table of the supported
// combinations of reduction, devices, process layout and where the variables live.
// TowerTrainer is a facade that forwards to the one it was given; fit() drives its loop.
// docs/strategies.md ("Adding a strategy") shows how a new one is a file and a row.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/towers/tower_state.h"

namespace towerjit::detail {

class FitLoop;

class TowerStrategy {
 public:
  using StepResult = TowerTrainer::StepResult;
  using AsyncReport = TowerTrainer::AsyncReport;
  using BatchFor = std::function<HostFeeds(int tower, int step)>;
  // What a strategy lists of its programs: when it runs (in words), its graph and kernel IR,
  // and its dump stem.
  using AddProgram = std::function<void(const std::string& stem, const std::string& runs, const Graph& graph,
                                        const kir::Program& program)>;

  explicit TowerStrategy(TowerState& state) : state_(state) {}
  virtual ~TowerStrategy() = default;
  TowerStrategy(const TowerStrategy&) = delete;
  TowerStrategy& operator=(const TowerStrategy&) = delete;

  // One step on a batch (TowerTrainer::step without its loss check; `whole_batch` as
  // StepOptions::whole_batch).
  virtual StepResult step(const HostFeeds& batch, int64_t whole_batch, Loc loc) = 0;
  // A step of `micro` micro-batches and one apply. Default: the error naming where it is built.
  virtual StepResult accumulated_step(const HostFeeds& batch, int micro, Loc loc);
  // Towers running free (TowerTrainer::run_async). Default: the error naming the strategy.
  virtual AsyncReport run_async(int steps_per_tower, const BatchFor& batch_for, Loc loc);
  // fit()'s loop over the batches. Default: one step() per batch.
  virtual void fit(FitLoop& loop, int accumulate, Loc loc);
  // Whether fit() stops on SIGINT and SIGTERM (after a step every rank shares).
  virtual bool stops_on_signals() const { return true; }
  // Whether every gradient is applied as it comes (then fit() accumulates no micro-batches).
  virtual bool applies_each_gradient() const { return false; }

  // The variables as a checkpoint stores them (a copy in host memory, refreshed if need be).
  virtual HostVariables& variables() = 0;
  // Replaces every copy of the variables (checked against variables() by the facade).
  virtual void restore(const HostVariables& values) = 0;
  // The gradients the last step applied, by the apply's input names ("tower_gradient/<variable>"),
  // where the strategy forms them in host memory; null where it does not (the default).
  virtual const HostFeeds* last_gradients() const { return nullptr; }
  // The devices holding a copy of each variable (TowerTrainer::variable_devices). Default:
  // every variable in host memory, {cpu(0)}.
  virtual std::map<std::string, std::vector<Device>> variable_devices() const;
  // Its programs besides the towers' and predict's: applies, reductions.
  virtual void list_programs(const AddProgram& add) const = 0;
  // Names its rows of a trace (the applies).
  virtual void name_trace_rows(report::Trace& trace) const {}

 protected:
  // The error a strategy without accumulation raises (one message, whichever strategy).
  [[noreturn]] static void no_accumulation(int micro, Loc loc);
  TowerState& state_;
};

// What the factory's table matches on: the strategy as declared, and the process layout.
struct StrategyRequest {
  bool async = false;
  SyncVariant variant = SyncVariant::replicated;
  bool all_gpus = false;
  int processes = 1;
  int rank = 0;
  // The variables on the GPUs (towers that are all GPUs): sync, a copy on each; async, each
  // variable on one (the seed's rule, which keeps them on the host from 4 towers on).
  bool gpu_variables = false;
  bool deterministic_layout = false;  // TOWERJIT_DETERMINISTIC=layout
  std::string declared;               // the strategy but its devices: "split=... reduce=... variant=..."
  double bucket_mb = 25;              // TOWERJIT_BUCKET_MB
  bool nccl_world = false;            // TOWERJIT_NCCL_WORLD
  bool per_variable = false;          // Towers::with rules
  DType gradient_compression = DType::f32;
  bool prefetch_feeds = true;         // TOWERJIT_PREFETCH_FEEDS
  // Gradient compression asked for where gradients cross processes. (In one process the option
  // is taken by every strategy: only sync towers with the variables on several GPUs reduce
  // through a collective, NCCL, which it then compresses.)
  bool compresses() const { return gradient_compression != DType::f32 && processes > 1; }
  // The request for `towers` in `world`, `options` overridden by the environment.
  static StrategyRequest of(const Towers& towers, const dist::Transport& world, const TowerStrategyOptions& options);
  // The options as resolved (the environment's overrides applied).
  TowerStrategyOptions options() const {
    return {.gpu_variables = gpu_variables, .deterministic_layout = deterministic_layout, .bucket_mb = bucket_mb,
            .gradient_compression = gradient_compression, .prefetch_feeds = prefetch_feeds};
  }
  std::string str() const;
  // What every rank must agree on about the strategy (dist::check_agreement): the declaration
  // but its devices and what decides the sequence of collectives.
  std::map<std::string, std::string> settings() const;
};

using MakeStrategy = std::unique_ptr<TowerStrategy> (*)(TowerState& state, Loc loc);

// A row of the table: the combination it serves and how to make its strategy.
struct StrategyRow {
  enum class Reduce { sync, async };
  enum class Variant { any, replicated, parameter_server };  // sync variants
  enum class Devices { any, all_gpus };
  enum class Processes { one, any, several_rank_0, several_other_ranks };
  enum class Variables { host, gpus, either };
  const char* name;
  Reduce reduce;
  Variant variant;
  Devices devices;
  Processes processes;
  Variables variables;
  bool layout_determinism;  // TOWERJIT_DETERMINISTIC=layout over several processes
  bool runs_towers;         // false: this rank's towers stay idle (a parameter server)
  MakeStrategy make;
  // The strategy applies the variables of Towers::with rules by their own reduction; only such a
  // row serves towers with rules, and it serves no others.
  bool per_variable = false;
  // The strategy sends gradients across processes in 16 bits when asked
  // (TowerStrategyOptions::gradient_compression; runtime/towers/reducer.h).
  bool compression = false;
  std::string str() const;  // "sync_gpu: sync, all GPUs, any processes, variables on the GPUs"
};

// The row serving `request`, or null (require_strategy says why).
const StrategyRow* find_strategy(const StrategyRequest& request);
// The row serving `request`. Errors (at `loc`): none does; the message lists the supported
// combinations and, where one row misses by one column, what to change.
const StrategyRow& require_strategy(const StrategyRequest& request, Loc loc);
// The table itself, in match order.
const std::vector<StrategyRow>& strategy_table();

// A row matched ahead of the table's, for as long as this object lives: a strategy defined
// outside the library (a test's, docs/strategies.md) joins the factory without a rebuild.
class ExtraStrategyRow {
 public:
  explicit ExtraStrategyRow(StrategyRow row);
  ~ExtraStrategyRow();
  ExtraStrategyRow(const ExtraStrategyRow&) = delete;
  ExtraStrategyRow& operator=(const ExtraStrategyRow&) = delete;
};

}  // namespace towerjit::detail
