#include "runtime/towers/tower_state.h"

#include <algorithm>
#include <cmath>

#include "dsl/error.h"
#include "dsl/index_errors.h"
#include "jit/knobs.h"
#include "runtime/cpu_affinity.h"

namespace towerjit::detail {
namespace {

// Random numbers are keyed by apply * kMaxTowers + tower (plus the micro-batch, high bits).
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

}  // namespace

uint64_t random_key(int64_t applies, int tower, int micro) {
  return (static_cast<uint64_t>(micro) << 40) + static_cast<uint64_t>(applies) * kMaxTowers + static_cast<uint64_t>(tower);
}

TowerState::TowerState(Towers towers_in, dist::Transport& world_in, bool runs_towers, Loc loc)
    : towers(std::move(towers_in)),
      world(&world_in),
      layout(dist::world_layout(runs_towers ? towers.size() : 0, loc)),
      tower_cores(cores_of_towers(towers)),
      pinned(knobs::pin_towers()),
      threads_(towers.size(), pinned ? tower_cores : std::vector<std::vector<int>>{}) {
  // A CPU tower with several cores of its own splits its loops and products over them.
  for (int t = 0; t < towers.size(); ++t) {
    const int cores = static_cast<int>(tower_cores[t].size());
    std::vector<std::vector<int>> pins(pinned ? cores : 0, tower_cores[t]);
    tower_pools.push_back(cores > 1 ? std::make_unique<ThreadPool>(cores, std::move(pins)) : nullptr);
  }
}

void TowerState::on_tower_threads(int count, const std::function<void(int)>& body) {
  const ScopedPin pin(pinned ? tower_cores[0] : std::vector<int>{});
  if (count == 1) return body(0);  // one apply, one chunk: no pool wake-up
  threads_.parallel_for(threads_.size(), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < std::min<int64_t>(end, count); ++t) body(static_cast<int>(t));
  });
}

report::Trace::Span TowerState::traced(std::string_view name, std::string_view category, int row) {
  return trace ? trace->span(name, category, row) : report::Trace::Span{};
}

TowerOutputs TowerState::run_tower(int t, const HostFeeds& feeds, HostVariables& values, uint64_t key) {
  return TowerOutputs(compiled.tower_step[t]->run(feeds, values, key), compiled.gradient_inputs.size(),
                      compiled.sparse.size());
}

TowerOutputs TowerState::run_tower(int t, const BatchSplit& split, HostVariables& values) {
  TowerOutputs out;
  on_slice(split, t, [&] {
    report::Trace::Span compute = traced("forward+backward", "compute", t);
    compute.arg("examples", split.slice(t));
    out = run_tower(t, split.feeds[t], values, random_key(applies, split.first + t));
  });
  return out;
}

// A tower's program sees its slice only: an error naming an example (an out-of-range label)
// counts from the slice's start, which the batch's numbering needs added (the whole batch's,
// over every process's rows).
void TowerState::on_slice(const BatchSplit& split, int t, const std::function<void()>& body) {
  const int64_t row = split.first_row_of(t);
  try {
    body();
  } catch (const IndexOutOfRange& e) {
    throw e.in_batch_from(row);
  } catch (const Error& e) {
    if (row == 0) throw;
    throw Error(std::string(e.what()) + " [tower " + std::to_string(split.first + t) + " (" +
                towers.devices()[t].str() + ") ran examples " + std::to_string(row) + " to " +
                std::to_string(row + split.slice(t) - 1) + " of the batch: add " + std::to_string(row) +
                " to an index above for its place in the batch]");
  }
}

void StalenessLog::add(int64_t staleness) {
  ++report.applies;
  report.max_staleness = std::max(report.max_staleness, staleness);
  sum += staleness;
}

TowerTrainer::AsyncReport StalenessLog::summary() const {
  TowerTrainer::AsyncReport r = report;
  r.mean_staleness = r.applies ? static_cast<double>(sum) / r.applies : 0;
  return r;
}

void TowerState::count_async_apply(int64_t staleness) {
  so_far_.add(staleness);
  if (trace) trace->counter("staleness", static_cast<double>(staleness));
}

double TowerState::applied(const std::vector<HostTensor>& fetched) {
  if (fetched.size() == 3) {
    const double scale = fetched[1].f32[0], skipped = fetched[2].f32[0];
    loss_scale_ = scale;
    skipped_steps_ = static_cast<int64_t>(skipped);
    if (trace) trace->counter("loss_scale", scale), trace->counter("skipped_steps", skipped);
  }
  return fetched[0].f32[0];
}

std::optional<TowerTrainer::LossScaleReport> TowerState::loss_scale() const {
  const double scale = loss_scale_;
  if (std::isnan(scale)) return std::nullopt;
  return TowerTrainer::LossScaleReport{scale, skipped_steps_};
}

void TowerState::count_lead(int64_t lead) {
  std::lock_guard lock(apply_mutex);
  so_far_.report.max_lead = std::max(so_far_.report.max_lead, lead);
}

TowerTrainer::AsyncReport TowerState::async_report() const {
  std::lock_guard lock(apply_mutex);
  return so_far_.summary();
}

}  // namespace towerjit::detail
