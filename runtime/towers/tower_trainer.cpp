#include "runtime/towers/tower_trainer.h"


#include <algorithm>
#include <cmath>
#include <cstring>

#include "dsl/error.h"
#include "jit/knobs.h"
#include "jit/passes/cut_collectives.h"
#include "jit/passes/select_phase.h"
#include "jit/reference/interpreter.h"
#include "runtime/cpu_affinity.h"
#include "runtime/cuda/cuda_program.h"
#include "runtime/report/trace.h"
#include "runtime/towers/async_towers.h"
#include "runtime/towers/gpu_resident_sync.h"
#include "runtime/towers/non_finite_inputs.h"

namespace towerjit {
namespace {

HostTensor to_host(const reference::Array& a) {
  HostTensor t(a.shape, a.dtype);
  for (int64_t i = 0; i < a.size(); ++i) {
    if (a.dtype == DType::f32) t.f32[i] = static_cast<float>(a[i]);
    else t.i32[i] = static_cast<int32_t>(a[i]);
  }
  return t;
}

// Random numbers (dropout) are keyed by step * kMaxTowers + tower.
constexpr uint64_t kMaxTowers = 1024;

// Each CPU tower's cores: disjoint groups of the process's cores (runtime/cpu_affinity.h);
// none for GPU towers, whose threads mostly wait.
std::vector<std::vector<int>> cores_of_towers(const Towers& towers) {
  int cpu_towers = 0;
  for (const Device& d : towers.devices()) cpu_towers += d.kind == DeviceKind::cpu;
  const std::vector<std::vector<int>> groups = tower_cores(cpu_towers, allowed_cores());
  std::vector<std::vector<int>> out(towers.size());
  for (int t = 0, k = 0; t < towers.size(); ++t)
    if (towers.devices()[t].kind == DeviceKind::cpu) out[t] = groups[k++];
  return out;
}

// Whether sync towers keep the variables on the GPUs (all GPUs, TOWERJIT_GPU_VARIABLES).
bool variables_on_gpus(const Towers& towers) {
  bool all_gpus = true;
  for (const Device& d : towers.devices()) all_gpus = all_gpus && d.kind == DeviceKind::gpu;
  return all_gpus && !is_async(towers.reduction()) && knobs::gpu_variables();
}

// What every rank of a world must agree on before training together: the model (its graph's
// text, source lines included), the strategy but its devices, the optimiser, the options, and
// what decides the sequence of collectives (where the reduction runs, the buckets).
std::map<std::string, std::string> trainer_settings(const Graph& graph, const Towers& towers,
                                                    const Optimizer& optimizer, const TowerTrainerOptions& options) {
  std::string ema = "off";
  if (options.ema) ema = "decay " + std::to_string(options.ema->decay);
  return {{"model (graph hash)", dist::text_hash(graph.str())},
          {"strategy", "split=" + to_string(towers.split_policy()) + " reduce=" + to_string(towers.reduction()) +
                           (is_async(towers.reduction()) ? "" : " variant=" + to_string(towers.sync_variant()))},
          {"optimizer", optimizer.str()},
          {"seed", std::to_string(options.seed)},
          {"ema", ema},
          {"TOWERJIT_DETERMINISTIC", knobs::deterministic_layout() ? "layout" : "off"},
          {"the variables (TOWERJIT_GPU_VARIABLES and the towers' devices)",
           variables_on_gpus(towers) ? "on the GPUs" : "on the host"},
          {"TOWERJIT_BUCKET_MB", std::to_string(knobs::bucket_mb())},
          {"TOWERJIT_NCCL_WORLD", knobs::nccl_world() ? "on" : "off"}};
}

// Trace rows: towers 0..N-1, then the reduction, then each replica's apply.
constexpr int kReduceRow = 1000;
constexpr int kApplyRow = 1001;

}  // namespace

TowerTrainer::TowerTrainer(Graph& graph, Tensor loss, Towers towers, const Optimizer& optimizer,
                           TowerTrainerOptions options, Loc loc)
    : towers_(std::move(towers)),
      world_(&dist::world(loc)),
      // Async across processes: rank 0 serves the variables and runs no towers.
      layout_(dist::world_layout(
          is_async(towers_.reduction()) && world_->size() > 1 && world_->rank() == 0 ? 0 : towers_.size(), loc)),
      deterministic_layout_(knobs::deterministic_layout()),
      has_ema_(options.ema.has_value()),
      tower_cores_(cores_of_towers(towers_)),
      pinned_(knobs::pin_towers()),
      threads_(towers_.size(), pinned_ ? tower_cores_ : std::vector<std::vector<int>>{}) {
  if (world_->size() > 1) {
    // Every rank checks, before compiling anything, that the others build the same trainer.
    dist::check_agreement(trainer_settings(graph, towers_, optimizer, options), loc);
  }
  const TowerProgram program = build_tower_program(graph, loss, optimizer, options.ema, loc);
  model_updates_ = program.model_updates;
  gradient_inputs_ = program.gradient_inputs;
  for (size_t v = 0; v < gradient_inputs_.size(); ++v) gradient_shapes_.push_back(program.gradient(v).shape());
  // The towers' program: the loss and every gradient, for any slice size.
  // A CPU tower with several cores of its own splits its loops and products over them.
  for (int t = 0; t < towers_.size(); ++t) {
    const int cores = static_cast<int>(tower_cores_[t].size());
    std::vector<std::vector<int>> pins(pinned_ ? cores : 0, tower_cores_[t]);
    tower_pools_.push_back(cores > 1 ? std::make_unique<ThreadPool>(cores, std::move(pins)) : nullptr);
  }
  for (int t = 0; t < towers_.size(); ++t)
    tower_programs_.push_back(
        DeviceProgram::compile(graph, program.tower_fetches, towers_.devices()[t], tower_pools_[t].get(),
                               "tower_step", loc));
  if (options.logits.valid()) {
    user_check(&options.logits.graph() == &graph, loc)
        << "TowerTrainerOptions::logits belongs to another graph; pass the model's output tensor";
    // In inference: batch norm on its moving statistics, no dropout (dsl/phase.h).
    Rewritten inference = select_phase(graph, Phase::inference);
    const std::vector<Tensor> logits = remap_tensors(inference, {options.logits});
    for (int t = 0; t < towers_.size(); ++t)
      predict_programs_.push_back(
          DeviceProgram::compile(inference.graph, logits, towers_.devices()[t], tower_pools_[t].get(), "predict", loc));
  }
  // Sync towers that are all GPUs keep the variables there when asked (TOWERJIT_GPU_VARIABLES):
  // one copy per GPU, the reduction and the apply on the GPUs; the host copy is a cache.
  const bool on_gpus = variables_on_gpus(towers_);
  user_check(!on_gpus || !deterministic_layout_ || world_->size() == 1, loc)
      << dist::rank_prefix() << "TOWERJIT_DETERMINISTIC=layout with the variables on the GPUs is not built; unset "
      << "TOWERJIT_GPU_VARIABLES (the host path gathers every tower's gradients) or the determinism";
  const bool replicated =
      !is_async(towers_.reduction()) && towers_.sync_variant() == SyncVariant::replicated && !on_gpus;
  const int replicas = replicated ? towers_.size() : 1;
  // The apply program, one per replica: the graph cut at the collectives, whose results it
  // reads as inputs (fed by all_reduce() below); it fetches the learning rate the apply used.
  Rewritten apply_side = cut_at_collectives(graph, TowerProgram::gradient_scale);
  const std::vector<Tensor> apply_fetches = remap_tensors(apply_side, {program.learning_rate});
  const std::vector<Tensor> apply_updates = remap_tensors(apply_side, program.apply_updates);
  for (int r = 0; r < replicas && !on_gpus; ++r)
    apply_programs_.push_back(
        std::make_unique<CpuProgram>(apply_side.graph, apply_fetches, apply_updates, nullptr, "apply"));

  ema_shadows_ = ema_names(graph);
  HostVariables initial;
  for (auto& [name, value] : reference::initialize_variables(graph, options.seed)) initial[name] = to_host(value);
  replicas_.assign(replicas, initial);
  if (on_gpus) {
    GpuResidentSync::Setup setup{.apply_graph = &apply_side.graph, .apply_fetches = apply_fetches,
                                 .apply_updates = apply_updates, .gradient_inputs = gradient_inputs_,
                                 .gradient_scale = TowerProgram::gradient_scale, .world = world_};
    for (auto& p : tower_programs_) setup.towers.push_back(p->cuda());
    for (const auto& u : model_updates_) setup.model_update_variables.push_back(u.variable);
    on_gpus_ = std::make_unique<GpuResidentSync>(setup, initial, loc);
  }
}

HostVariables& TowerTrainer::variables() {
  if (on_gpus_ && host_stale_) {
    on_gpus_->download(replicas_[0]);
    host_stale_ = false;
  }
  return replicas_[0];
}

// A sync step with the variables on the GPUs (runtime/towers/gpu_resident_sync.h).
TowerTrainer::StepResult TowerTrainer::step_on_gpus(const std::vector<HostFeeds>& feeds, StepResult result,
                                                    const std::vector<double>& weights, int64_t examples) {
  // This process's towers' share of the batch (result.slices are the world's).
  std::vector<double> by_slice;
  const int first = layout_.first_tower;
  for (int t = 0; t < towers_.size(); ++t) by_slice.push_back(static_cast<double>(result.slices[first + t]) / examples);
  const uint64_t step_key = static_cast<uint64_t>(applies_);
  report::Trace::Span span = traced("step on the GPUs", "compute", kReduceRow);
  const GpuResidentSync::Result r = on_gpus_->step(
      feeds, weights, by_slice, [&](int t) { return step_key * kMaxTowers + first + t; },
      [&](int count, const std::function<void(int)>& body) { on_tower_threads(count, body); });
  span.end();
  host_stale_ = true;
  ++applies_;
  result.learning_rate = r.learning_rate;
  for (size_t t = 0; t < r.losses.size(); ++t) result.loss += by_slice[t] * r.losses[t];
  try {
    world_->all_reduce_sum(&result.loss, 1);  // the other processes' towers' share
  } catch (const std::runtime_error& e) {
    user_check(false, Loc::current()) << dist::rank_prefix() << "the loss's all-reduce failed: " << e.what();
  }
  return result;
}

TowerTrainer::~TowerTrainer() = default;

std::vector<HostFeeds> TowerTrainer::slice_batch(const HostFeeds& batch,
                                                 const std::vector<int64_t>& slices, Loc loc) const {
  std::vector<HostFeeds> out(slices.size());
  for (const auto& [name, t] : batch) {
    user_check(t.shape.rank() > 0, loc) << "input \"" << name << "\" is a scalar; every input "
                                        << "fed to the towers needs the batch as its first dimension";
    int64_t offset = 0;
    for (size_t i = 0; i < slices.size(); ++i) {
      out[i][name] = rows_of(t, offset, slices[i]);
      offset += slices[i];
    }
  }
  return out;
}

std::vector<TowerTrainer::ProgramView> TowerTrainer::programs() const {
  // Named by role within this trainer: a program's dump stem may carry a suffix other trainers
  // of the process caused (tower_step_2), and the towers' copies of one program are one.
  std::vector<ProgramView> out;
  std::vector<const kir::Program*> seen;
  std::map<std::string, int> per_role;
  auto add = [&](const std::string& stem, std::string runs, const Graph& g, const kir::Program& p) {
    if (std::find(seen.begin(), seen.end(), &p) != seen.end()) return;
    seen.push_back(&p);
    std::string role = stem;
    if (const size_t cut = stem.find_last_of('_'); cut != std::string::npos && cut + 1 < stem.size() &&
        stem.find_first_not_of("0123456789", cut + 1) == std::string::npos)
      role = stem.substr(0, cut);
    const int n = ++per_role[role];
    out.push_back({n == 1 ? role : role + "_" + std::to_string(n), std::move(runs), &g, &p});
  };
  const auto& first_tower = tower_programs_.front();
  add(first_tower->name(), "every tower, on its slice of each batch: the loss and the gradients",
      first_tower->lowered_graph(), first_tower->program());
  const std::string apply_runs = is_async(towers_.reduction()) ? "after each tower's step, on its own gradients"
                                                               : "once per step per copy of the variables, on the reduced gradients";
  if (!apply_programs_.empty())
    add(apply_programs_[0]->name(), apply_runs, apply_programs_[0]->lowered_graph(), apply_programs_[0]->program());
  if (on_gpus_)
    for (const CudaProgram* p : on_gpus_->programs())
      add(p->name(), p->name().starts_with("apply") ? apply_runs : "on each GPU, summing its towers' or the GPUs' values",
          p->lowered_graph(), p->program());
  if (!predict_programs_.empty())
    add(predict_programs_[0]->name(), "predict() and evaluate(), on every tower's slice, in inference",
        predict_programs_[0]->lowered_graph(), predict_programs_[0]->program());
  return out;
}

void TowerTrainer::set_trace(report::Trace* trace) {
  trace_ = trace;
  if (!trace_) return;
  for (int t = 0; t < towers_.size(); ++t)
    trace_->name_thread(t, "tower " + std::to_string(t) + " (" + towers_.devices()[t].str() + ")");
  trace_->name_thread(kReduceRow, "all-reduce");
  for (size_t r = 0; r < replicas_.size() && !is_async(towers_.reduction()); ++r)
    trace_->name_thread(kApplyRow + static_cast<int>(r),
                        replicated() ? "apply, replica " + std::to_string(r) : "apply");
}

report::Trace::Span TowerTrainer::traced(std::string_view name, std::string_view category, int row) {
  return trace_ ? trace_->span(name, category, row) : report::Trace::Span{};
}

// An async tower's own gradients as the apply's feeds, moved out of its outputs, with the
// strategy's factor (1/N with scale_gradient) as the scale the apply multiplies them by.
HostFeeds TowerTrainer::own_gradients(std::vector<HostTensor>& outputs, double weight) const {
  HostFeeds feeds;
  for (size_t v = 0; v < gradient_inputs_.size(); ++v) feeds[gradient_inputs_[v]] = std::move(outputs[v + 1]);
  feeds[TowerProgram::gradient_scale] = scalar(weight);
  return feeds;
}

// Runs the optimiser's (and the EMA's) apply once on a replica; returns the learning rate used.
double TowerTrainer::apply(const HostFeeds& gradients, int replica) {
  const auto out = apply_programs_[replica]->run(gradients, replicas_[replica], static_cast<uint64_t>(applies_));
  return out[0].f32[0];
}

// The model's update ops: the given towers' new values, weighted (sync: by slice size, so a
// moving mean follows the whole batch's mean; async: one tower's value), in tower order.
void TowerTrainer::write_model_updates(const std::vector<std::vector<HostTensor>>& outputs,
                                       const std::vector<double>& weights,
                                       const std::vector<int>& towers, HostVariables& target) {
  const size_t first = 1 + gradient_inputs_.size();
  for (size_t u = 0; u < model_updates_.size(); ++u) {
    HostTensor& value = target.at(model_updates_[u].variable);
    for (int64_t k = 0; k < value.size(); ++k) {
      double sum = 0;
      for (size_t j = 0; j < towers.size(); ++j)
        sum += weights[towers.size() == 1 ? 0 : j] * outputs[towers[j]][first + u].f32[k];
      value.f32[k] = static_cast<float>(sum);
    }
  }
}

TowerTrainer::StepResult TowerTrainer::step(const HostFeeds& batch, Loc loc) { return step(batch, {}, loc); }

TowerTrainer::StepResult TowerTrainer::step(const HostFeeds& batch, StepOptions options, Loc loc) {
  user_check(options.accumulate >= 1, loc) << "step: accumulate " << options.accumulate
                                            << " must be at least 1 (1: one apply per batch, as without it)";
  StepResult result = options.accumulate > 1 ? accumulated_step(batch, options.accumulate, loc)
                                             : train_step(batch, options.whole_batch, loc);
  if (options.check_loss && !std::isfinite(result.loss)) {
    const std::string bad = first_non_finite_input(batch);
    user_check(false, loc) << "step: the loss is " << (std::isnan(result.loss) ? "NaN" : "infinite") << " at apply "
                           << applies_ << "; the variables now hold this step's update; "
                           << (bad.empty() ? "every input of the batch is finite, so the training diverged: lower the "
                                             "learning rate or clip the gradients"
                                           : "the batch's " + bad + ": the data is the cause")
                           << " (step(batch, {.check_loss = false}) returns such a loss instead)";
  }
  return result;
}

TowerTrainer::StepResult TowerTrainer::train_step(const HostFeeds& batch, int64_t whole_batch, Loc loc) {
  user_check(!async_world(), loc) << dist::rank_prefix() << "step: async towers across processes train through "
                                  << "fit(), which runs the parameter server on rank 0; call fit()";
  user_check(!batch.empty(), loc) << "step: no inputs fed; feed the model's inputs with the batch";
  const int64_t rows = batch.begin()->second.shape.rank() ? batch.begin()->second.shape[0] : 0;
  for (const auto& [name, t] : batch)
    user_check(t.shape.rank() > 0 && t.shape[0] == rows, loc)
        << "step: input \"" << name << "\" has " << count_of(t.shape.rank() ? t.shape[0] : 0, "example")
        << " but \"" << batch.begin()->first << "\" has " << rows
        << "; feed every input the same batch";
  // The world's split of the whole batch; this process trains its towers' slices.
  const int64_t examples = whole_batch > 0 ? whole_batch : rows;
  StepResult result;
  result.slices = split_batch(examples, layout_.towers(), towers_.split_policy(), loc);
  const std::vector<double> all_weights = reduction_weights(result.slices, towers_.reduction(), loc);
  const int n = towers_.size(), first = layout_.first_tower;
  const std::vector<int64_t> own_slices(result.slices.begin() + first, result.slices.begin() + first + n);
  const std::vector<double> weights(all_weights.begin() + first, all_weights.begin() + first + n);
  const auto [own_first, own_count] = own_rows(examples, loc);
  if (whole_batch > 0) {
    user_check(rows == own_count, loc)
        << dist::rank_prefix() << "step: fed " << count_of(rows, "example") << " as this process's part of a batch of "
        << examples << ", but its towers' slices hold " << own_count << " (rows " << own_first << " to "
        << own_first + own_count - 1 << "); feed TowerTrainer::own_rows() of each batch";
  }
  std::vector<int64_t> cut = own_slices;
  if (whole_batch == 0 && own_first > 0) cut.insert(cut.begin(), own_first);  // the other processes' rows
  std::vector<HostFeeds> feeds = slice_batch(batch, cut, loc);
  if (whole_batch == 0 && own_first > 0) feeds.erase(feeds.begin());
  if (on_gpus_) return step_on_gpus(feeds, std::move(result), weights, examples);
  std::vector<std::vector<HostTensor>> outputs(n);
  const bool async = is_async(towers_.reduction());
  const uint64_t step_key = static_cast<uint64_t>(applies_);
  std::vector<OwnApply> own(async ? n : 0);
  // An async tower applies as soon as its gradient is ready.
  on_tower_threads(n, [&](int t) {
    // A tower's program sees its slice only: an error naming an example (an out-of-range
    // label) counts from the slice's start, which the batch's numbering needs added (the whole
    // batch's, over every process's rows).
    int64_t row = own_first;
    for (int i = 0; i < t; ++i) row += own_slices[i];
    try {
      if (async) {
        own[t] = compute_and_apply(t, feeds[t], weights[t]);
        return;
      }
      // Dropout masks differ between towers and steps (and repeat on a resumed run); keyed by the
      // world's tower index, so a tower draws the same masks in whichever process it runs.
      report::Trace::Span compute = traced("forward+backward", "compute", t);
      compute.arg("examples", own_slices[t]);
      outputs[t] = tower_programs_[t]->run(feeds[t], variables_of(t), step_key * kMaxTowers + first + t);
    } catch (const Error& e) {
      if (row == 0) throw;
      throw Error(std::string(e.what()) + " [tower " + std::to_string(first + t) + " (" + towers_.devices()[t].str() +
                  ") ran examples " + std::to_string(row) + " to " + std::to_string(row + own_slices[t] - 1) +
                  " of the batch: add " + std::to_string(row) + " to an index above for its place in the batch]");
    }
  });
  if (async) {
    const auto last = std::max_element(own.begin(), own.end(),
                                       [](const OwnApply& a, const OwnApply& b) { return a.applied_at < b.applied_at; });
    result.learning_rate = last->learning_rate;
    for (int t = 0; t < n; ++t) result.loss += static_cast<double>(own_slices[t]) / examples * own[t].loss;
    return result;
  }
  report::Trace::Span reduce = traced("all-reduce", "communication", kReduceRow);
  Reduced reduced = reduce_over_world(std::move(outputs), result.slices, all_weights, examples);
  reduce.end();
  apply_reduced(reduced, result);
  return result;
}

void TowerTrainer::apply_reduced(const Reduced& reduced, StepResult& result) {
  // Every replica applies the same reduced gradient (replicated), or the one copy does.
  const int replicas = static_cast<int>(replicas_.size());
  std::vector<double> rates(replicas);
  on_tower_threads(replicas, [&](int r) {
    report::Trace::Span span = traced("apply", "apply", kApplyRow + r);
    rates[r] = apply(reduced.gradients, r);
    for (size_t u = 0; u < model_updates_.size(); ++u)
      replicas_[r].at(model_updates_[u].variable) = reduced.model_updates[u];
  });
  result.learning_rate = rates[0];
  ++applies_;
  result.loss = reduced.loss;
}

// Each micro-batch is split over the towers and run as a step's slices are; every (micro-batch,
// tower) pair then counts as one tower of a step on the whole batch, weighted by its examples.
TowerTrainer::StepResult TowerTrainer::accumulated_step(const HostFeeds& batch, int micro, Loc loc) {
  user_check(std::holds_alternative<SyncAverage>(towers_.reduction()) && !on_gpus_ && world_->size() == 1, loc)
      << "step: accumulating over " << micro << " micro-batches needs SyncAverage towers in one process with the "
      << "variables in host memory (it weighs every example alike, as a step on the whole batch does); async "
      << "towers apply every gradient as it comes and the per-tower reductions weigh towers, not examples (use "
      << "accumulate = 1); with TOWERJIT_GPU_VARIABLES=on the GPUs reduce each step, and across processes it is "
      << "not built yet";
  user_check(!batch.empty() && batch.begin()->second.shape.rank() > 0, loc)
      << "step: no batched inputs fed; feed the model's inputs with the batch";
  const int64_t examples = batch.begin()->second.shape[0];
  for (const auto& [name, t] : batch)
    user_check(t.shape.rank() > 0 && t.shape[0] == examples, loc)
        << "step: input \"" << name << "\" has " << count_of(t.shape.rank() ? t.shape[0] : 0, "example")
        << " but \"" << batch.begin()->first << "\" has " << examples << "; feed every input the same batch";
  user_check(examples >= micro * static_cast<int64_t>(towers_.size()), loc)
      << "step: " << count_of(examples, "example") << " cannot make " << micro << " micro-batches for "
      << count_of(towers_.size(), "tower") << "; feed at least " << micro * towers_.size() << " examples";
  const int n = towers_.size();
  const std::vector<int64_t> parts = split_batch(examples, micro, Split::balanced, loc);
  const uint64_t step_key = static_cast<uint64_t>(applies_);
  std::vector<std::vector<HostTensor>> outputs;
  std::vector<int64_t> slices_all;
  std::vector<double> weights;
  StepResult result;
  result.slices.assign(n, 0);
  int64_t start = 0;
  for (int m = 0; m < micro; ++m) {
    HostFeeds part;
    for (const auto& [name, t] : batch) part[name] = rows_of(t, start, parts[m]);
    start += parts[m];
    const std::vector<int64_t> slices = towers_.slices(parts[m], loc);
    const std::vector<HostFeeds> feeds = slice_batch(part, slices, loc);
    std::vector<std::vector<HostTensor>> out(n);
    on_tower_threads(n, [&](int t) {
      // Masks differ between micro-batches too (micro-batch 0 keys as a plain step does).
      const uint64_t key = (static_cast<uint64_t>(m) << 40) + step_key * kMaxTowers + t;
      out[t] = tower_programs_[t]->run(feeds[t], variables_of(t), key);
    });
    for (int t = 0; t < n; ++t) {
      outputs.push_back(std::move(out[t]));
      slices_all.push_back(slices[t]);
      weights.push_back(static_cast<double>(slices[t]) / examples);
      result.slices[t] += slices[t];
    }
  }
  report::Trace::Span reduce = traced("all-reduce", "communication", kReduceRow);
  const Reduced reduced = reduce_over_world(std::move(outputs), slices_all, weights, examples);
  reduce.end();
  apply_reduced(reduced, result);
  return result;
}

// Tower t's work on its thread (thread t of threads_, pinned to the tower's cores); the
// caller's thread runs tower 0's, pinned to tower 0's cores meanwhile.
void TowerTrainer::on_tower_threads(int count, const std::function<void(int)>& body) {
  const ScopedPin pin(pinned_ ? tower_cores_[0] : std::vector<int>{});
  if (count == 1) return body(0);  // one apply (parameter server), one chunk: no pool wake-up
  threads_.parallel_for(threads_.size(), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < std::min<int64_t>(end, count); ++t) body(static_cast<int>(t));
  });
}

TowerTrainer::OwnApply TowerTrainer::compute_and_apply(int tower, const HostFeeds& feeds, double scale) {
  const int64_t read_at = applies_;
  std::vector<std::vector<HostTensor>> outputs(towers_.size());
  report::Trace::Span compute = traced("forward+backward", "compute", tower);
  compute.arg("examples", feeds.begin()->second.shape[0]);
  // Dropout masks differ between towers and applies.
  outputs[tower] = tower_programs_[tower]->run(feeds, replicas_[0], static_cast<uint64_t>(read_at) * kMaxTowers + tower);
  compute.end();
  const HostFeeds gradients = own_gradients(outputs[tower], scale);
  std::lock_guard lock(apply_mutex_);
  OwnApply result{.loss = outputs[tower][0].f32[0], .staleness = applies_ - read_at, .applied_at = applies_};
  report::Trace::Span span = traced("apply", "apply", tower);
  span.arg("staleness", result.staleness);
  if (trace_) trace_->counter("staleness", static_cast<double>(result.staleness));
  ++async_so_far_.applies;
  async_so_far_.max_staleness = std::max(async_so_far_.max_staleness, result.staleness);
  staleness_sum_ += result.staleness;
  result.learning_rate = apply(gradients, 0);
  ++applies_;
  write_model_updates(outputs, {1.0}, {tower}, replicas_[0]);
  return result;
}

TowerTrainer::AsyncReport TowerTrainer::run_async(
    int steps_per_tower, const std::function<HostFeeds(int, int)>& batch_for, Loc loc) {
  user_check(!async_world(), loc) << dist::rank_prefix() << "run_async: async towers across processes train "
                                  << "through fit(); call fit()";
  user_check(is_async(towers_.reduction()), loc)
      << "run_async: the towers are declared " << to_string(towers_.reduction())
      << "; declare them with .reduce(AsyncApply{}) to run them free";
  AsyncTowers engine(*this);
  const int n = towers_.size();
  // Steps are queued as the towers take them, at most `window` per tower ahead.
  const int64_t window = AsyncTowers::window(towers_.reduction());
  for (int s = 0; s < steps_per_tower; ++s) {
    for (int t = 0; t < n; ++t) engine.submit(t, batch_for(t, s), s);
    while (engine.outstanding() > window * n) engine.next_done();
  }
  while (engine.outstanding() > 0) engine.next_done();
  return engine.report();
}

TowerTrainer::AsyncReport TowerTrainer::async_report() const {
  std::lock_guard lock(apply_mutex_);
  AsyncReport r = async_so_far_;
  r.mean_staleness = r.applies ? static_cast<double>(staleness_sum_) / r.applies : 0;
  return r;
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
  for (HostVariables& replica : replicas_) replica = values;
  if (on_gpus_) on_gpus_->upload(values);
  host_stale_ = false;
  applies_ = applies;
}

}  // namespace towerjit
