// The table of supported tower strategies: the one place that decides, from the declared
// towers and the process layout, which strategy trains. A new strategy is a file in
// strategies/ plus its row here (docs/strategies.md).
#include <sstream>

#include "dsl/error.h"
#include "jit/knobs.h"
#include "runtime/towers/tower_strategy.h"

namespace towerjit::detail {

// Each strategy file's factory.
std::unique_ptr<TowerStrategy> make_sync_host_replicated(TowerState& state, Loc loc);
std::unique_ptr<TowerStrategy> make_sync_host_one_copy(TowerState& state, Loc loc);
std::unique_ptr<TowerStrategy> make_sync_gpu(TowerState& state, Loc loc);
std::unique_ptr<TowerStrategy> make_sync_placed(TowerState& state, Loc loc);
std::unique_ptr<TowerStrategy> make_async_local(TowerState& state, Loc loc);
std::unique_ptr<TowerStrategy> make_async_placed(TowerState& state, Loc loc);
std::unique_ptr<TowerStrategy> make_async_server(TowerState& state, Loc loc);
std::unique_ptr<TowerStrategy> make_async_worker(TowerState& state, Loc loc);
std::unique_ptr<TowerStrategy> make_sync_async_by_variable(TowerState& state, Loc loc);

namespace {

using R = StrategyRow;

// First match wins.
const std::vector<StrategyRow> kTable = {
    // name                   reduce          variant                       devices            processes                             variables              determinism towers  make  per_variable compression
    {"sync_async_by_variable", R::Reduce::sync,  R::Variant::any,              R::Devices::any,      R::Processes::any,                 R::Variables::host,    true,  true,  make_sync_async_by_variable, true, true},
    {"sync_placed",           R::Reduce::sync,  R::Variant::parameter_server, R::Devices::all_gpus, R::Processes::one,                 R::Variables::gpus,    true,  true,  make_sync_placed},
    {"sync_gpu",              R::Reduce::sync,  R::Variant::any,              R::Devices::all_gpus, R::Processes::any,                 R::Variables::gpus,    false, true,  make_sync_gpu, false, true},
    {"sync_host",             R::Reduce::sync,  R::Variant::replicated,       R::Devices::any,      R::Processes::any,                 R::Variables::host,    true,  true,  make_sync_host_replicated, false, true},
    {"sync_host_one_copy",    R::Reduce::sync,  R::Variant::parameter_server, R::Devices::any,      R::Processes::any,                 R::Variables::host,    true,  true,  make_sync_host_one_copy,   false, true},
    {"async_placed",          R::Reduce::async, R::Variant::any,              R::Devices::all_gpus, R::Processes::one,                 R::Variables::gpus,    true,  true,  make_async_placed},
    {"async_local",           R::Reduce::async, R::Variant::any,              R::Devices::any,      R::Processes::one,                 R::Variables::either,  true,  true,  make_async_local},
    {"async_server",          R::Reduce::async, R::Variant::any,              R::Devices::any,      R::Processes::several_rank_0,      R::Variables::either,  true,  false, make_async_server},
    {"async_worker",          R::Reduce::async, R::Variant::any,              R::Devices::any,      R::Processes::several_other_ranks, R::Variables::either,  true,  true,  make_async_worker},
};

// Each column: whether the row serves the request, and what to change when it is the only miss.
struct Column {
  bool (*serves)(const StrategyRow&, const StrategyRequest&);
  const char* fix;
};
const Column kColumns[] = {
    {[](const R& r, const StrategyRequest& q) { return !q.compresses() || (r.compression && !q.deterministic_layout); },
     "gradient compression (TowerStrategyOptions::gradient_compression) is built for sync towers all-reducing "
     "their gradients (in host memory, or on the GPUs through NCCL and MPI) without TOWERJIT_DETERMINISTIC=layout "
     "(whose gather sends every tower's f32 gradients); declare sync towers with the default determinism, or train "
     "without it"},
    {[](const R& r, const StrategyRequest& q) { return r.per_variable == q.per_variable; },
     "per-variable rules (Towers::with) are built for sync towers in one process with the variables in host memory; "
     "drop the rules or train that way"},
    {[](const R& r, const StrategyRequest& q) { return (r.reduce == R::Reduce::async) == q.async; },
     "declare the towers with the reduction this combination takes"},
    {[](const R& r, const StrategyRequest& q) {
       return r.variant == R::Variant::any ||
              (r.variant == R::Variant::replicated) == (q.variant == SyncVariant::replicated);
     },
     "declare the other sync variant (Towers::variant)"},
    {[](const R& r, const StrategyRequest& q) { return r.devices == R::Devices::any || q.all_gpus; },
     "make every tower a GPU"},
    {[](const R& r, const StrategyRequest& q) {
       switch (r.processes) {
         case R::Processes::one: return q.processes == 1;
         case R::Processes::any: return true;
         case R::Processes::several_rank_0: return q.processes > 1 && q.rank == 0;
         case R::Processes::several_other_ranks: return q.processes > 1 && q.rank > 0;
       }
       return false;
     },
     "run it in one process"},
    {[](const R& r, const StrategyRequest& q) {
       return r.variables == R::Variables::either || (r.variables == R::Variables::gpus) == q.gpu_variables;
     },
     "set TowerStrategyOptions::gpu_variables (or TOWERJIT_GPU_VARIABLES) the other way"},
    {[](const R& r, const StrategyRequest& q) {
       return r.layout_determinism || !q.deterministic_layout || q.processes == 1;
     },
     "TOWERJIT_DETERMINISTIC=layout with the variables on the GPUs is not built; unset TOWERJIT_GPU_VARIABLES (the "
     "host path gathers every tower's gradients) or the determinism"},
};

const char* name_of(R::Processes p) {
  switch (p) {
    case R::Processes::one: return "one process";
    case R::Processes::any: return "any processes";
    case R::Processes::several_rank_0: return "several processes, rank 0 (the parameter server)";
    case R::Processes::several_other_ranks: return "several processes, ranks 1 and up (workers)";
  }
  return "";
}

}  // namespace

StrategyRequest StrategyRequest::of(const Towers& towers, const dist::Transport& world,
                                    const TowerStrategyOptions& options) {
  StrategyRequest q;
  q.async = is_async(towers.reduction());
  q.variant = towers.sync_variant();
  q.all_gpus = true;
  for (const Device& d : towers.devices()) q.all_gpus = q.all_gpus && d.kind == DeviceKind::gpu;
  q.processes = world.size();
  q.rank = world.rank();
  // The variables go on the GPUs where every tower is one: for sync towers when asked; for
  // async towers unless asked not to. Async towers and the sync parameter-server variant place
  // each variable on one GPU by the seed's rule (dsl/towers.h place_variables), which keeps
  // them in host memory from 4 towers on. Elsewhere they stay in host memory.
  const bool placed = q.async || q.variant == SyncVariant::parameter_server;
  const bool on_gpus_by_rule = !places_variables_on_cpu(towers.devices().size());
  q.gpu_variables = knobs::gpu_variables(options.gpu_variables.value_or(q.async && on_gpus_by_rule)) && q.all_gpus &&
                    (!placed || on_gpus_by_rule);
  q.deterministic_layout = knobs::deterministic_layout(options.deterministic_layout);
  const std::string text = towers.str();  // "Towers{cpu:0,cpu:1} split=... reduce=... variant=..."
  q.declared = text.substr(text.find("} ") + 2);
  q.bucket_mb = knobs::bucket_mb(options.bucket_mb);
  q.prefetch_feeds = knobs::prefetch_feeds(options.prefetch_feeds);
  q.nccl_world = knobs::nccl_world();
  q.per_variable = !towers.rules().empty();
  user_check(options.gradient_compression == DType::f32 || is_half_float(options.gradient_compression),
             towers.declared_at())
      << "TowerStrategyOptions::gradient_compression is " << dtype_name(options.gradient_compression)
      << "; gradients cross processes in DType::bf16 or DType::f16, or uncompressed (DType::f32)";
  q.gradient_compression = options.gradient_compression;
  user_check(options.bucket_mb >= 0, towers.declared_at())
      << "TowerStrategyOptions::bucket_mb " << options.bucket_mb << " is negative; set 0 (a bucket per gradient) or more";
  return q;
}

std::map<std::string, std::string> StrategyRequest::settings() const {
  const StrategyRow* row = find_strategy(*this);
  const bool on_gpus = row && row->variables == R::Variables::gpus;
  return {{"strategy", declared},
          {"TOWERJIT_DETERMINISTIC", deterministic_layout ? "layout" : "off"},
          {"the variables (TOWERJIT_GPU_VARIABLES and the towers' devices)", on_gpus ? "on the GPUs" : "on the host"},
          {"TOWERJIT_BUCKET_MB", std::to_string(bucket_mb)},
          {"TOWERJIT_NCCL_WORLD", nccl_world ? "on" : "off"}};
}

std::string StrategyRequest::str() const {
  std::ostringstream s;
  s << (async ? "async" : "sync") << (async ? "" : variant == SyncVariant::replicated ? " replicated" : " parameter_server")
    << ", " << (all_gpus ? "all GPUs" : "not all GPUs") << ", " << processes << " process" << (processes > 1 ? "es" : "")
    << ", variables " << (gpu_variables ? "on the GPUs" : "in host memory")
    << (deterministic_layout ? ", TOWERJIT_DETERMINISTIC=layout" : "") << (per_variable ? ", per-variable rules" : "")
    << (compresses() ? ", gradient compression" : "");
  return s.str();
}

std::string StrategyRow::str() const {
  std::ostringstream s;
  s << name << ": " << (reduce == Reduce::sync ? "sync" : "async")
    << (variant == Variant::replicated ? " replicated" : variant == Variant::parameter_server ? " parameter_server" : "")
    << ", " << (devices == Devices::all_gpus ? "all GPUs" : "any devices") << ", " << name_of(processes) << ", "
    << (variables == Variables::gpus ? "variables on the GPUs" : variables == Variables::host ? "variables in host memory"
                                                                                              : "variables in host memory")
    << (layout_determinism ? "" : ", no TOWERJIT_DETERMINISTIC=layout over several processes")
    << (per_variable ? ", per-variable rules (Towers::with)" : "") << (compression ? ", gradient compression" : "");
  return s.str();
}

const std::vector<StrategyRow>& strategy_table() { return kTable; }

namespace {
std::vector<StrategyRow>& extra_rows() {
  static std::vector<StrategyRow> rows;
  return rows;
}
// The extra rows (newest first), then the table's.
std::vector<StrategyRow> all_rows() {
  std::vector<StrategyRow> rows(extra_rows().rbegin(), extra_rows().rend());
  rows.insert(rows.end(), kTable.begin(), kTable.end());
  return rows;
}
}  // namespace

ExtraStrategyRow::ExtraStrategyRow(StrategyRow row) { extra_rows().push_back(row); }
ExtraStrategyRow::~ExtraStrategyRow() { extra_rows().pop_back(); }

const StrategyRow* find_strategy(const StrategyRequest& request) {
  for (auto it = extra_rows().rbegin(); it != extra_rows().rend(); ++it) {
    bool all = true;
    for (const Column& c : kColumns) all = all && c.serves(*it, request);
    if (all) return &*it;
  }
  for (const StrategyRow& row : kTable) {
    bool all = true;
    for (const Column& c : kColumns) all = all && c.serves(row, request);
    if (all) return &row;
  }
  return nullptr;
}

const StrategyRow& require_strategy(const StrategyRequest& request, Loc loc) {
  if (const StrategyRow* row = find_strategy(request)) return *row;
  std::string fix;
  const std::vector<StrategyRow> rows = all_rows();
  for (const StrategyRow& row : rows) {
    int misses = 0;
    const Column* missed = nullptr;
    for (const Column& c : kColumns)
      if (!c.serves(row, request)) ++misses, missed = &c;
    if (misses == 1 && fix.empty()) fix = missed->fix;
  }
  std::ostringstream supported;
  for (const StrategyRow& row : rows) supported << "\n  " << row.str();
  user_check(false, loc) << dist::rank_prefix() << (fix.empty() ? "" : fix + "; ") << "no tower strategy trains "
                         << request.str() << "; the supported combinations:" << supported.str();
  std::abort();  // not reached
}

}  // namespace towerjit::detail
