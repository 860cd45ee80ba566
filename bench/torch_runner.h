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
  std::string name;  // "1t", "2t-passive", "2t-openblas1"
  int threads;
  std::string env;   // assignments put before the command, e.g. "OMP_WAIT_POLICY=PASSIVE"
};

// 1 thread; 2 threads with OMP_WAIT_POLICY=PASSIVE; 2 threads with OPENBLAS_NUM_THREADS=1.
std::vector<TorchSetting> torch_settings();

struct TorchResult {
  double step_ms = 0, step_ms_min = 0, step_ms_max = 0, samples_per_s = 0;
};

// setting name -> workload -> result.
using TorchResults = std::map<std::string, std::map<std::string, TorchResult>>;

// A Python that imports torch: $TOWERJIT_BENCH_PYTHON, /usr/bin/python3 (Debian's
// python3-torch lives there even when another python3 is first on PATH), then python3.
// nullopt when none does; `why` then says what was tried.
std::optional<std::string> find_torch_python(std::string* why);

// Runs the script once per setting for `workloads`; a setting that fails is left out and
// reported on stderr.
TorchResults run_torch(const std::string& python, const std::string& script,
                       const std::vector<std::string>& workloads, int steps, int warmup);

}  // namespace towerjit::bench
