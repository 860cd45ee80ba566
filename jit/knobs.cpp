#include "jit/knobs.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>

#include "dsl/error.h"

namespace towerjit::knobs {
namespace {

// An empty value counts as unset: `FOO= cmd` is the usual way to clear a variable.
std::optional<std::string> read(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

// A switch: "on", "1", "true", "yes" or "off", "0", "false", "no" (any case); unset or empty:
// `fallback`. Anything else is an error naming the knob, never a silent default.
static bool switch_knob(const char* name, bool fallback, const char* what_on = nullptr) {
  const auto value = read(name);
  if (!value) return fallback;
  const std::string v = lower(*value);
  if (v == "on" || v == "1" || v == "true" || v == "yes") return true;
  if (v == "off" || v == "0" || v == "false" || v == "no") return false;
  throw Error(std::string("towerjit: ") + name + "=" + *value + " is not a switch: set on or off" +
              (what_on ? std::string(" (") + what_on + ")" : ""));
}

bool cache_enabled() { return switch_knob("TOWERJIT_CACHE", true); }
bool group_kernels_enabled() { return switch_knob("TOWERJIT_GROUP_KERNELS", true); }
bool pin_towers() { return switch_knob("TOWERJIT_PIN_TOWERS", true); }
bool nccl_enabled() { return switch_knob("TOWERJIT_NCCL", true); }
bool cuda_caching() { return switch_knob("TOWERJIT_CUDA_CACHING", true); }
double bucket_mb() {
  const auto v = read("TOWERJIT_BUCKET_MB");
  if (!v) return 25;
  char* end = nullptr;
  const double mb = std::strtod(v->c_str(), &end);
  if (!end || *end != '\0' || !(mb >= 0) || mb > 1e6)
    throw Error("towerjit: TOWERJIT_BUCKET_MB=" + *v + " is not a size in MB: set a number from 0 (a bucket per "
                "gradient) up, e.g. 25 (the default)");
  return mb;
}
bool nccl_world() { return switch_knob("TOWERJIT_NCCL_WORLD", false); }
bool gpu_variables() { return switch_knob("TOWERJIT_GPU_VARIABLES", false); }
bool direct_conv() {
  return switch_knob("TOWERJIT_DIRECT_CONV", true,
                     "to hold the direct kernels to AVX2, set TOWERJIT_CPU_ISA=avx2");
}
bool check_numerics() { return switch_knob("TOWERJIT_CHECK_NUMERICS", false); }
std::optional<CpuIsa> cpu_isa_cap() {
  const auto v = read("TOWERJIT_CPU_ISA");
  if (!v) return std::nullopt;
  const std::string level = lower(*v);
  if (level == "avx512") return CpuIsa::avx512;
  if (level == "avx2") return CpuIsa::avx2;
  if (level == "baseline") return CpuIsa::baseline;
  throw Error("towerjit: TOWERJIT_CPU_ISA=" + *v + " is not a level: set avx512, avx2 or baseline, "
              "or unset it for the widest this CPU has");
}

std::optional<std::string> cache_dir_override() { return read("TOWERJIT_CACHE_DIR"); }
std::optional<std::string> xdg_cache_home() { return read("XDG_CACHE_HOME"); }
std::optional<std::string> home() { return read("HOME"); }
std::optional<std::string> dump_dir() { return read("TOWERJIT_DUMP"); }

std::string cache_dir() {
  namespace fs = std::filesystem;
  if (auto dir = cache_dir_override()) return *dir;
  if (auto xdg = xdg_cache_home()) return (fs::path(*xdg) / "towerjit").string();
  if (auto h = home()) return (fs::path(*h) / ".cache" / "towerjit").string();
  return (fs::temp_directory_path() / "towerjit-cache").string();
}

}  // namespace towerjit::knobs

namespace towerjit::knobs {

int debug_level() {
  const auto v = read("TOWERJIT_DEBUG");
  if (!v) return 0;
  if (v->size() == 1 && (*v)[0] >= '0' && (*v)[0] <= '3') return (*v)[0] - '0';
  throw Error("towerjit: TOWERJIT_DEBUG=" + *v + " is not a level: set 0 (quiet), 1 (a line per compiled program), "
              "2 (the graph after each pass) or 3 (the kernel IR too)");
}

}  // namespace towerjit::knobs

namespace towerjit::knobs {

std::optional<std::string> cuda_arch() { return read("TOWERJIT_CUDA_ARCH"); }
bool cuda_emulated() {
  const std::string v = lower(read("TOWERJIT_CUDA").value_or("driver"));
  if (v == "emulator") return true;
  if (v == "driver") return false;
  throw Error("towerjit: TOWERJIT_CUDA=" + v + " is not a CUDA backend: set emulator (the emulated GPU) or "
              "driver (NVIDIA's, the default)");
}
static int positive(const char* name, int fallback) {
  const auto v = read(name);
  if (!v) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v->c_str(), &end, 10);
  if (!end || *end != '\0' || n < 1 || n > 1 << 20)
    throw Error(std::string("towerjit: ") + name + "=" + *v + " is not a positive whole number");
  return static_cast<int>(n);
}
int emulated_gpus() { return positive("TOWERJIT_EMULATED_GPUS", 1); }
int emulated_gpu_mb() { return positive("TOWERJIT_EMULATED_GPU_MB", 4096); }
std::optional<unsigned long long> emulator_random_schedule() {
  const std::string v = lower(read("TOWERJIT_EMULATOR_SCHEDULE").value_or("fifo"));
  if (v == "fifo") return std::nullopt;
  char* end = nullptr;
  const unsigned long long seed = v.rfind("random:", 0) == 0 ? std::strtoull(v.c_str() + 7, &end, 10) : 0;
  if (!end || *end != '\0' || v.size() == 7)
    throw Error("towerjit: TOWERJIT_EMULATOR_SCHEDULE=" + v + " is not a schedule: set random:SEED (a whole "
                "number) or fifo");
  return seed;
}
// A library towerjit loads at run time: the knob's path, else the file beside the library
// this function is in (libtowerjit_jit.so: build/lib/ in a build, <prefix>/lib/ in an install,
// wherever the prefix was moved to), else the bare name for the loader's search.
static std::string plugin_library(const char* knob, const char* name) {
  if (auto v = read(knob)) return *v;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&plugin_library), &info) && info.dli_fname) {
    const auto beside = std::filesystem::path(info.dli_fname).parent_path() / name;
    std::error_code ec;
    if (std::filesystem::exists(beside, ec)) return beside.string();
  }
  return name;
}
std::string emulator_library() {
  return plugin_library("TOWERJIT_EMULATOR_LIBRARY", "libtowerjit_cuda_emulator.so");
}
bool mpi_enabled() { return switch_knob("TOWERJIT_MPI", true); }
std::string mpi_library() { return plugin_library("TOWERJIT_MPI_LIBRARY", "libtowerjit_mpi.so"); }
namespace {
// A knob holding seconds: `fallback` when unset; a value that is not a number, is negative, or
// is 0 where 0 means nothing (`zero_ok` false) is an error naming the knob and what it sets.
double seconds_knob(const char* name, double fallback, bool zero_ok, const std::string& what) {
  const auto v = read(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double s = std::strtod(v->c_str(), &end);
  if (v->empty() || !end || *end != '\0' || !(zero_ok ? s >= 0 : s > 0))
    throw Error("towerjit: " + std::string(name) + "=" + *v + " is not a time: set " + what);
  return s;
}
}  // namespace
double mpi_start_timeout_s() {
  return seconds_knob("TOWERJIT_MPI_START_TIMEOUT", 30, false,
                      "the seconds a rank may take to reach the others, e.g. 30 (the default)");
}
double mpi_stall_warning_s() {
  return seconds_knob("TOWERJIT_MPI_STALL_WARNING", 60, false,
                      "the seconds a rank waits for the others in one MPI call before it warns, e.g. 60 (the default)");
}
double mpi_stall_timeout_s() {
  return seconds_knob("TOWERJIT_MPI_STALL_TIMEOUT", 0, true,
                      "the seconds a rank waits for the others in one MPI call before it stops, or 0 (the "
                      "default) never to stop");
}
bool deterministic_layout() {
  const std::string v = lower(read("TOWERJIT_DETERMINISTIC").value_or(""));
  if (v.empty() || v == "off" || v == "0" || v == "false" || v == "no") return false;
  if (v == "layout") return true;
  throw Error("towerjit: TOWERJIT_DETERMINISTIC=" + v + " is not a mode; use \"layout\" (bitwise the same whatever "
              "the split of the towers into processes) or \"off\"");
}
std::optional<std::string> cuda_home() { return read("CUDA_HOME"); }

bool cuda_graphs() { return switch_knob("TOWERJIT_CUDA_GRAPHS", true); }

}  // namespace towerjit::knobs

namespace towerjit::knobs {

bool allow_tf32() { return switch_knob("TOWERJIT_ALLOW_TF32", false); }
int emulated_gpu_sms() { return positive("TOWERJIT_EMULATED_GPU_SMS", 4); }
bool cudnn_enabled() { return switch_knob("TOWERJIT_CUDNN", true); }
std::optional<int64_t> cudnn_workspace_mb() {
  const auto v = read("TOWERJIT_CUDNN_WORKSPACE_MB");
  if (!v) return std::nullopt;
  char* end = nullptr;
  const long long mb = std::strtoll(v->c_str(), &end, 10);
  if (!end || *end != '\0' || mb < 0 || mb > (int64_t{1} << 40))
    throw Error("towerjit: TOWERJIT_CUDNN_WORKSPACE_MB=" + *v + " is not a size in MiB: set a whole number from 0 "
                "(algorithms without a workspace only), or unset it for the device's free memory");
  return mb;
}
std::optional<std::string> python_env_prefix() {
  if (auto v = read("VIRTUAL_ENV")) return v;
  return read("CONDA_PREFIX");
}

}  // namespace towerjit::knobs
