// Runs bench/torch_baseline.py under the three thread settings and collects its
// figures. PyTorch's speed on a small noisy machine swings with these settings, so the
// benchmark compares against the best of them, measured in the same run.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace towerjit::bench {

struct TorchSetting {
  std::string name;  // "1t", "2t-passive", "2t-openblas1"; with "+<core>" for the same kernels
  int threads;
  std::string env;   // env(1) arguments put before the command, e.g. "OMP_WAIT_POLICY=PASSIVE"
  bool same_kernels = false;  // OpenBLAS told to use the kernels towerjit uses
};

// The three: 1 thread; 2 threads with OMP_WAIT_POLICY=PASSIVE; 2 threads with
// OPENBLAS_NUM_THREADS=1, each with PyTorch's OpenBLAS as installed (OPENBLAS_CORETYPE as the
// user had it, `user_core`, else unset). Then, unless the user's value already is `our_core`,
// the same three with OPENBLAS_CORETYPE=`our_core`: Debian's OpenBLAS does not recognise some
// CPUs (this machine's among them) and falls back to its slowest kernels, which towerjit
// avoids by naming the kernels itself (runtime/cpu/blas.h); these settings show how much of a
// ratio is that alone.
std::vector<TorchSetting> torch_settings(const char* user_core, const std::string& our_core);

struct TorchResult {
  double step_ms = 0, step_ms_min = 0, step_ms_max = 0, samples_per_s = 0;
  double first_step_ms = 0;  // the first step alone: torch.compile's and jax.jit's compile
  std::string cpu_capability;  // PyTorch's vector level as it reports it ("AVX2"); empty for JAX
  std::string attention;       // gpt-small on PyTorch 2.x: the faster attention, "fused" or "written out"
};

// setting name -> workload -> result.
using TorchResults = std::map<std::string, std::map<std::string, TorchResult>>;

// A Python that imports torch: $TOWERJIT_BENCH_PYTHON, /usr/bin/python3 (Debian's
// python3-torch lives there even when another python3 is first on PATH), then python3.
// nullopt when none does; `why` then says what was tried.
std::optional<std::string> find_torch_python(std::string* why);

// Runs the script once per setting for `workloads`, with `args` added (bench/peers.h's peers
// share this runner and the scripts' output format); a setting that fails is left out and
// reported on stderr.
TorchResults run_torch(const std::string& python, const std::string& script,
                       const std::vector<TorchSetting>& settings,
                       const std::vector<std::string>& workloads, int steps, int warmup,
                       const std::string& args = "");

// Runs `command` through the shell; its stdout, and its exit status in `status`.
std::string capture(const std::string& command, int* status);

}  // namespace towerjit::bench
