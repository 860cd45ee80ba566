#include "jit/knobs.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string_view>

#include "dsl/error.h"
#include "jit/compile_options.h"

namespace towerjit::knobs {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

// ---- How each kind of value is read. The accessors and the check of the environment call
// these same functions, so a value the check lets pass is one the accessor reads. Each takes
// the knob's name and a non-empty value, and throws Error naming both and what to set.

// A switch: "on", "1", "true", "yes" or "off", "0", "false", "no" (any case). Anything else is an
// error naming the knob, never a silent default.
bool parse_switch(const char* name, const std::string& value, const char* what_on = nullptr) {
  const std::string v = lower(value);
  if (v == "on" || v == "1" || v == "true" || v == "yes") return true;
  if (v == "off" || v == "0" || v == "false" || v == "no") return false;
  throw Error(std::string("towerjit: ") + name + "=" + value + " is not a switch: set on or off" +
              (what_on ? std::string(" (") + what_on + ")" : ""));
}
constexpr const char* kDirectConvHint = "to hold the direct kernels to AVX2, set TOWERJIT_CPU_ISA=avx2";

int parse_debug(const char* name, const std::string& v) {
  if (v.size() == 1 && v[0] >= '0' && v[0] <= '3') return v[0] - '0';
  throw Error(std::string("towerjit: ") + name + "=" + v + " is not a level: set 0 (quiet), 1 (a line per compiled "
              "program), 2 (the graph after each pass) or 3 (the kernel IR too)");
}

CpuIsa parse_cpu_isa(const char* name, const std::string& v) {
  const std::string level = lower(v);
  if (level == "amx") return CpuIsa::amx;
  if (level == "avx512bf16") return CpuIsa::avx512bf16;
  if (level == "avx512") return CpuIsa::avx512;
  if (level == "avx2") return CpuIsa::avx2;
  if (level == "baseline") return CpuIsa::baseline;
  throw Error(std::string("towerjit: ") + name + "=" + v + " is not a level: set amx, avx512bf16, avx512, avx2 or baseline, "
              "or unset it for the widest this CPU has");
}

double parse_bucket_mb(const char* name, const std::string& v) {
  char* end = nullptr;
  const double mb = std::strtod(v.c_str(), &end);
  if (!end || *end != '\0' || !(mb >= 0) || mb > 1e6)
    throw Error(std::string("towerjit: ") + name + "=" + v + " is not a size in MB: set a number from 0 (a bucket "
                "per gradient) up, e.g. 25 (the default)");
  return mb;
}

bool parse_deterministic(const char* name, const std::string& value) {
  const std::string v = lower(value);
  if (v == "off" || v == "0" || v == "false" || v == "no") return false;
  if (v == "layout") return true;
  throw Error(std::string("towerjit: ") + name + "=" + v + " is not a mode; use \"layout\" (bitwise the same "
              "whatever the split of the towers into processes) or \"off\"");
}

// Seconds: a number, above 0 (or 0 too where 0 means never: `zero_ok`); `what` says what to set.
double parse_seconds(const char* name, const std::string& v, bool zero_ok, const char* what) {
  char* end = nullptr;
  const double s = std::strtod(v.c_str(), &end);
  if (!end || *end != '\0' || !(zero_ok ? s >= 0 : s > 0))
    throw Error(std::string("towerjit: ") + name + "=" + v + " is not a time: set " + what);
  return s;
}
constexpr const char* kStartTimeout = "the seconds a rank may take to reach the others, e.g. 30 (the default)";
constexpr const char* kStallWarning =
    "the seconds a rank waits for the others in one MPI call before it warns, e.g. 60 (the default)";
constexpr const char* kStallTimeout =
    "the seconds a rank waits for the others in one MPI call before it stops, or 0 (the default) never to stop";
constexpr const char* kNcclTimeout =
    "the seconds an emulated NCCL rank waits for the others in an all-reduce, e.g. 120 (the default)";

bool parse_cuda(const char* name, const std::string& value) {
  const std::string v = lower(value);
  if (v == "emulator") return true;
  if (v == "driver") return false;
  throw Error(std::string("towerjit: ") + name + "=" + v + " is not a CUDA backend: set emulator (the emulated GPU) "
              "or driver (NVIDIA's, the default)");
}

int parse_positive(const char* name, const std::string& v) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (!end || *end != '\0' || n < 1 || n > 1 << 20)
    throw Error(std::string("towerjit: ") + name + "=" + v + " is not a positive whole number");
  return static_cast<int>(n);
}

int64_t parse_workspace_mb(const char* name, const std::string& v) {
  char* end = nullptr;
  const long long mb = std::strtoll(v.c_str(), &end, 10);
  if (!end || *end != '\0' || mb < 0 || mb > (int64_t{1} << 40))
    throw Error(std::string("towerjit: ") + name + "=" + v + " is not a size in MiB: set a whole number from 0 "
                "(algorithms without a workspace only), or unset it for the device's free memory");
  return mb;
}

double parse_milliseconds(const char* name, const std::string& v) {
  char* end = nullptr;
  const double ms = std::strtod(v.c_str(), &end);
  if (!end || *end != '\0' || v.empty() || !(ms > 0) || !(ms < 1e9))
    throw Error(std::string("towerjit: ") + name + "=" + v + " is not a time in milliseconds: set a number above 0");
  return ms;
}

// "random:SEED" gives the seed, "fifo" nullopt.
std::optional<unsigned long long> parse_schedule(const char* name, const std::string& value) {
  const std::string v = lower(value);
  if (v == "fifo") return std::nullopt;
  char* end = nullptr;
  const unsigned long long seed = v.rfind("random:", 0) == 0 ? std::strtoull(v.c_str() + 7, &end, 10) : 0;
  if (!end || *end != '\0' || v.size() == 7)
    throw Error(std::string("towerjit: ") + name + "=" + v + " is not a schedule: set random:SEED (a whole number) "
                "or fifo");
  return seed;
}

// ---- The table: every variable towerjit or the project's own programs read. A new knob is
// one row here and its accessor below (which reads its value with the row's parser).

using Check = void (*)(const char* name, const std::string& value);
struct Knob {
  const char* name;
  const char* kind;     // what its value is
  Check check;          // throws Error for a value the knob cannot read; nullptr: any text
  const char* read_by;  // nullptr: the accessors below; else the program that reads it itself
};

template <auto parse>
void checks(const char* name, const std::string& value) { parse(name, value); }
void switch_check(const char* name, const std::string& value) { parse_switch(name, value); }
void direct_conv_check(const char* name, const std::string& value) { parse_switch(name, value, kDirectConvHint); }
template <const char* const* what, bool zero_ok>
void seconds_check(const char* name, const std::string& value) { parse_seconds(name, value, zero_ok, *what); }

constexpr Knob kKnobs[] = {
    // The compiler.
    {"TOWERJIT_CACHE", "switch", switch_check, nullptr},
    {"TOWERJIT_CACHE_DIR", "directory", nullptr, nullptr},
    {"XDG_CACHE_HOME", "directory", nullptr, nullptr},
    {"HOME", "directory", nullptr, nullptr},
    {"TOWERJIT_DUMP", "directory", nullptr, nullptr},
    {"TOWERJIT_DEBUG", "level 0-3", checks<parse_debug>, nullptr},
    {"TOWERJIT_GROUP_KERNELS", "switch", switch_check, nullptr},
    {"TOWERJIT_MATMUL_EPILOGUES", "switch", switch_check, nullptr},
    {"TOWERJIT_CONV_EPILOGUES", "switch", switch_check, nullptr},
    {"TOWERJIT_FACTOR_SUMS", "switch", switch_check, nullptr},
    {"TOWERJIT_RECOMPUTE_IN_READERS", "switch", switch_check, nullptr},
    {"TOWERJIT_REDUCTION_FINISHERS", "switch", switch_check, nullptr},
    {"TOWERJIT_FUSED_MAX_POOLS", "switch", switch_check, nullptr},
    // The CPU code.
    {"TOWERJIT_CPU_ISA", "avx512, avx2 or baseline", checks<parse_cpu_isa>, nullptr},
    {"TOWERJIT_DIRECT_CONV", "switch", direct_conv_check, nullptr},
    {"TOWERJIT_CHECK_NUMERICS", "switch", switch_check, nullptr},
    // Towers and their strategy.
    {"TOWERJIT_PIN_TOWERS", "switch", switch_check, nullptr},
    {"TOWERJIT_GPU_VARIABLES", "switch", switch_check, nullptr},
    {"TOWERJIT_PREFETCH_FEEDS", "switch", switch_check, nullptr},
    {"TOWERJIT_BUCKET_MB", "MB, from 0", checks<parse_bucket_mb>, nullptr},
    {"TOWERJIT_DETERMINISTIC", "layout or off", checks<parse_deterministic>, nullptr},
    // Processes.
    {"TOWERJIT_MPI", "switch", switch_check, nullptr},
    {"TOWERJIT_MPI_LIBRARY", "file", nullptr, nullptr},
    {"TOWERJIT_MPI_START_TIMEOUT", "seconds, above 0", seconds_check<&kStartTimeout, false>, nullptr},
    {"TOWERJIT_MPI_STALL_WARNING", "seconds, above 0", seconds_check<&kStallWarning, false>, nullptr},
    {"TOWERJIT_MPI_STALL_TIMEOUT", "seconds, from 0", seconds_check<&kStallTimeout, true>, nullptr},
    // GPUs.
    {"TOWERJIT_CUDA", "emulator or driver", checks<parse_cuda>, nullptr},
    {"TOWERJIT_CUDA_ARCH", "sm_NN (checked when compiling: jit/cuda/nvrtc_compiler.cpp)", nullptr, nullptr},
    {"CUDA_HOME", "directory", nullptr, nullptr},
    {"TOWERJIT_CUDA_CACHING", "switch", switch_check, nullptr},
    {"TOWERJIT_CUDA_GRAPHS", "switch", switch_check, nullptr},
    {"TOWERJIT_ONE_PASS_REDUCTIONS", "switch", switch_check, nullptr},
    {"TOWERJIT_ALLOW_TF32", "switch", switch_check, nullptr},
    {"TOWERJIT_NCCL", "switch", switch_check, nullptr},
    {"TOWERJIT_NCCL_WORLD", "switch", switch_check, nullptr},
    {"TOWERJIT_CUDNN", "switch", switch_check, nullptr},
    {"TOWERJIT_CONV_IMPLICIT_GEMM", "switch", switch_check, nullptr},
    {"TOWERJIT_CUDNN_WORKSPACE_MB", "MiB, a whole number from 0", checks<parse_workspace_mb>, nullptr},
    {"VIRTUAL_ENV", "directory", nullptr, nullptr},
    {"CONDA_PREFIX", "directory", nullptr, nullptr},
    // The emulated GPU.
    {"TOWERJIT_EMULATED_GPUS", "a whole number from 1", checks<parse_positive>, nullptr},
    {"TOWERJIT_EMULATED_GPU_MB", "a whole number from 1", checks<parse_positive>, nullptr},
    {"TOWERJIT_EMULATED_GPU_SMS", "a whole number from 1", checks<parse_positive>, nullptr},
    {"TOWERJIT_EMULATED_CUDNN_MS", "milliseconds, above 0", checks<parse_milliseconds>, nullptr},
    {"TOWERJIT_EMULATOR_SCHEDULE", "random:SEED or fifo", checks<parse_schedule>, nullptr},
    {"TOWERJIT_EMULATOR_LIBRARY", "file", nullptr, nullptr},
    {"TOWERJIT_EMULATED_NCCL_TIMEOUT", "seconds, above 0", seconds_check<&kNcclTimeout, false>, nullptr},
    // Read by the project's own programs, not the library: declared so the check knows them.
    {"TOWERJIT_BENCH_PYTHON", "file", nullptr, "bench/torch_runner.cpp (towerjit_bench)"},
    {"TOWERJIT_FUZZ_VERBOSE", "anything: set means on", nullptr, "fuzz/graph_builder.cpp (the fuzzers)"},
    // towerjit_bench's peers (bench/peers.h): the Python to try first for PyTorch 2.x and JAX.
    {"TOWERJIT_BENCH_PEER_PYTHON", "file", nullptr, "bench/peers.cpp (towerjit_bench)"},
};

const Knob* find_knob(std::string_view name) {
  for (const Knob& k : kKnobs)
    if (name == k.name) return &k;
  return nullptr;
}

bool is_towerjit_name(std::string_view name) {
  constexpr std::string_view prefix = "TOWERJIT_";
  return name.size() >= prefix.size() && upper(std::string(name.substr(0, prefix.size()))) == prefix;
}

// Levenshtein distance: insertions, deletions and substitutions, each 1.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string unknown_name_warning(const std::string& name) {
  const auto near = detail::closest_knob(name);
  return "towerjit: warning: " + name + " is not a towerjit setting " +
         (near ? "(did you mean " + *near + "?)" : "(docs/cpu-jit.md lists them)") + "; it is ignored";
}

// An empty value counts as unset: `FOO= cmd` is the usual way to clear a variable. Checks the
// environment first (once it passes, a load of one flag), and that `name` is in the table.
std::optional<std::string> read(const char* name) {
  check_environment();
  if (is_towerjit_name(name) && !find_knob(name))
    throw std::logic_error(std::string("towerjit internal error: ") + name + " is read but not declared in the "
                           "table of jit/knobs.cpp");
  std::shared_lock lock(environment_mutex());
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// The knob's value read by `parse` when set, else `fallback`.
template <typename T, typename Parse>
T value_of(const char* name, T fallback, Parse parse) {
  const auto v = read(name);
  return v ? static_cast<T>(parse(name, *v)) : fallback;
}
bool switch_knob(const char* name, bool fallback) {
  return value_of(name, fallback, [](const char* n, const std::string& v) { return parse_switch(n, v); });
}

// A library towerjit loads at run time: the knob's path, else the file beside the library
// this function is in (libtowerjit_jit.so: build/lib/ in a build, <prefix>/lib/ in an install,
// wherever the prefix was moved to), else the bare name for the loader's search.
std::string plugin_library(const char* knob, const char* name) {
  if (auto v = read(knob)) return *v;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&plugin_library), &info) && info.dli_fname) {
    const auto beside = std::filesystem::path(info.dli_fname).parent_path() / name;
    std::error_code ec;
    if (std::filesystem::exists(beside, ec)) return beside.string();
  }
  return name;
}

}  // namespace

// ---- The compiler

bool cache_enabled() { return switch_knob("TOWERJIT_CACHE", true); }
// The three below: the environment variable when set, else the program's CompileOptions.
std::optional<std::string> cache_dir_override() {
  if (auto v = read("TOWERJIT_CACHE_DIR")) return v;
  std::string option = compile_options().cache_dir;
  return option.empty() ? std::nullopt : std::optional<std::string>(std::move(option));
}
std::optional<std::string> xdg_cache_home() { return read("XDG_CACHE_HOME"); }
std::optional<std::string> home() { return read("HOME"); }
std::string cache_dir() {
  namespace fs = std::filesystem;
  if (auto dir = cache_dir_override()) return *dir;
  if (auto xdg = xdg_cache_home()) return (fs::path(*xdg) / "towerjit").string();
  if (auto h = home()) return (fs::path(*h) / ".cache" / "towerjit").string();
  return (fs::temp_directory_path() / "towerjit-cache").string();
}
std::optional<std::string> dump_dir() {
  if (auto v = read("TOWERJIT_DUMP")) return v;
  std::string option = compile_options().dump_dir;
  return option.empty() ? std::nullopt : std::optional<std::string>(std::move(option));
}
int debug_level() { return value_of("TOWERJIT_DEBUG", 0, parse_debug); }
bool group_kernels_enabled() { return switch_knob("TOWERJIT_GROUP_KERNELS", true); }
bool matmul_epilogues_enabled() { return switch_knob("TOWERJIT_MATMUL_EPILOGUES", true); }
bool conv_epilogues_enabled() { return switch_knob("TOWERJIT_CONV_EPILOGUES", true); }
bool factor_sums_enabled() { return switch_knob("TOWERJIT_FACTOR_SUMS", true); }
bool recompute_in_readers_enabled() { return switch_knob("TOWERJIT_RECOMPUTE_IN_READERS", true); }
bool reduction_finishers_enabled() { return switch_knob("TOWERJIT_REDUCTION_FINISHERS", true); }
bool fused_max_pools_enabled() { return switch_knob("TOWERJIT_FUSED_MAX_POOLS", true); }

// ---- The CPU code

std::optional<CpuIsa> cpu_isa_cap() {
  return value_of("TOWERJIT_CPU_ISA", std::optional<CpuIsa>(), parse_cpu_isa);
}
bool direct_conv() {
  return value_of("TOWERJIT_DIRECT_CONV", true,
                  [](const char* n, const std::string& v) { return parse_switch(n, v, kDirectConvHint); });
}
bool check_numerics() { return switch_knob("TOWERJIT_CHECK_NUMERICS", compile_options().check_numerics); }

// ---- Towers and their strategy

bool pin_towers() { return switch_knob("TOWERJIT_PIN_TOWERS", true); }
bool gpu_variables() { return gpu_variables(false); }
bool gpu_variables(bool option) { return switch_knob("TOWERJIT_GPU_VARIABLES", option); }
bool prefetch_feeds(bool option) { return switch_knob("TOWERJIT_PREFETCH_FEEDS", option); }
double bucket_mb() { return bucket_mb(25); }
double bucket_mb(double option) { return value_of("TOWERJIT_BUCKET_MB", option, parse_bucket_mb); }
bool deterministic_layout() { return deterministic_layout(false); }
bool deterministic_layout(bool option) { return value_of("TOWERJIT_DETERMINISTIC", option, parse_deterministic); }

// ---- Processes (MPI)

bool mpi_enabled() { return switch_knob("TOWERJIT_MPI", true); }
std::string mpi_library() { return plugin_library("TOWERJIT_MPI_LIBRARY", "libtowerjit_mpi.so"); }
double mpi_start_timeout_s() {
  return value_of("TOWERJIT_MPI_START_TIMEOUT", 30.0,
                  [](const char* n, const std::string& v) { return parse_seconds(n, v, false, kStartTimeout); });
}
double mpi_stall_warning_s() {
  return value_of("TOWERJIT_MPI_STALL_WARNING", 60.0,
                  [](const char* n, const std::string& v) { return parse_seconds(n, v, false, kStallWarning); });
}
double mpi_stall_timeout_s() {
  return value_of("TOWERJIT_MPI_STALL_TIMEOUT", 0.0,
                  [](const char* n, const std::string& v) { return parse_seconds(n, v, true, kStallTimeout); });
}

// ---- GPUs: CUDA, its libraries and NCCL

bool cuda_emulated() { return value_of("TOWERJIT_CUDA", false, parse_cuda); }
std::optional<std::string> cuda_arch() { return read("TOWERJIT_CUDA_ARCH"); }
std::optional<std::string> cuda_home() { return read("CUDA_HOME"); }
bool cuda_caching() { return switch_knob("TOWERJIT_CUDA_CACHING", true); }
bool cuda_graphs() { return switch_knob("TOWERJIT_CUDA_GRAPHS", true); }
bool one_pass_reductions() { return switch_knob("TOWERJIT_ONE_PASS_REDUCTIONS", true); }
bool allow_tf32() { return switch_knob("TOWERJIT_ALLOW_TF32", false); }
bool nccl_enabled() { return switch_knob("TOWERJIT_NCCL", true); }
bool nccl_world() { return switch_knob("TOWERJIT_NCCL_WORLD", false); }
bool cudnn_enabled() { return switch_knob("TOWERJIT_CUDNN", true); }
bool conv_implicit_gemm() { return switch_knob("TOWERJIT_CONV_IMPLICIT_GEMM", true); }
std::optional<int64_t> cudnn_workspace_mb() {
  return value_of("TOWERJIT_CUDNN_WORKSPACE_MB", std::optional<int64_t>(), parse_workspace_mb);
}
std::optional<std::string> python_env_prefix() {
  if (auto v = read("VIRTUAL_ENV")) return v;
  return read("CONDA_PREFIX");
}

// ---- The emulated GPU

int emulated_gpus() { return value_of("TOWERJIT_EMULATED_GPUS", 1, parse_positive); }
int emulated_gpu_mb() { return value_of("TOWERJIT_EMULATED_GPU_MB", 4096, parse_positive); }
int emulated_gpu_sms() { return value_of("TOWERJIT_EMULATED_GPU_SMS", 4, parse_positive); }
double emulated_cudnn_ms() { return value_of("TOWERJIT_EMULATED_CUDNN_MS", 0.001, parse_milliseconds); }
std::optional<unsigned long long> emulator_random_schedule() {
  return value_of("TOWERJIT_EMULATOR_SCHEDULE", std::optional<unsigned long long>(), parse_schedule);
}
std::string emulator_library() {
  return plugin_library("TOWERJIT_EMULATOR_LIBRARY", "libtowerjit_cuda_emulator.so");
}
double emulated_nccl_timeout_s() {
  return value_of("TOWERJIT_EMULATED_NCCL_TIMEOUT", 120.0,
                  [](const char* n, const std::string& v) { return parse_seconds(n, v, false, kNcclTimeout); });
}

// ---- The check of the environment

namespace detail {

EnvironmentCheck check_variables(const std::vector<std::string>& entries) {
  EnvironmentCheck found;
  for (const std::string& entry : entries) {
    const size_t eq = entry.find('=');
    const std::string name = entry.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : entry.substr(eq + 1);
    if (!is_towerjit_name(name)) continue;
    const Knob* knob = find_knob(name);
    if (!knob) {
      found.warnings.push_back(unknown_name_warning(name));
      continue;
    }
    if (value.empty() || !knob->check || found.error) continue;
    try {
      knob->check(knob->name, value);
    } catch (const Error& e) {
      found.error = e.what();
    }
  }
  return found;
}

std::optional<std::string> closest_knob(const std::string& name) {
  // Near enough: at most a third of the name after TOWERJIT_ changed, and at least 2 edits
  // allowed (a dropped letter and a swapped one), so TOWERJIT_GPU_VARIABLE finds its knob
  // and TOWERJIT_FOO finds none.
  const std::string wanted = upper(name);
  const size_t allowed = std::max<size_t>(2, (wanted.size() - std::min<size_t>(wanted.size(), 9)) / 3);
  const Knob* best = nullptr;
  size_t best_distance = allowed + 1;
  for (const Knob& k : kKnobs) {
    if (!is_towerjit_name(k.name)) continue;
    const size_t d = edit_distance(wanted, k.name);
    if (d < best_distance) best = &k, best_distance = d;
  }
  if (!best) return std::nullopt;
  return std::string(best->name);
}

std::vector<std::string> declared_names() {
  std::vector<std::string> names;
  for (const Knob& k : kKnobs) names.emplace_back(k.name);
  return names;
}

}  // namespace detail

std::shared_mutex& environment_mutex() {
  static std::shared_mutex m;
  return m;
}

void check_environment() {
  // Once it has passed, each read costs this load. A thread that comes while another checks
  // waits for the outcome; an error leaves `passed` false, so every later read reports it too.
  static std::atomic<bool> passed{false};
  static std::mutex mutex;
  static bool warned = false;
  if (passed.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mutex);
  if (passed.load(std::memory_order_relaxed)) return;
  std::vector<std::string> entries;
  {
    std::shared_lock environment(environment_mutex());
    for (char** e = ::environ; e && *e; ++e) entries.emplace_back(*e);
  }
  const detail::EnvironmentCheck found = detail::check_variables(entries);
  if (!warned) {
    for (const std::string& w : found.warnings) std::fprintf(stderr, "%s\n", w.c_str());
    warned = true;
  }
  if (found.error)
    throw Error(*found.error + " (towerjit checks every TOWERJIT_ variable when it starts, whether or not this run "
                "reads it)");
  passed.store(true, std::memory_order_release);
}

}  // namespace towerjit::knobs
