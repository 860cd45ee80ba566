#include "bench/torch_runner.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "runtime/cpu/blas.h"

namespace towerjit::bench {

std::vector<TorchSetting> torch_settings(const char* user_core, const std::string& our_core) {
  const std::string installed = user_core ? std::string("OPENBLAS_CORETYPE=") + user_core : "-u OPENBLAS_CORETYPE";
  std::vector<TorchSetting> settings = {{"1t", 1, installed},
                                        {"2t-passive", 2, installed + " OMP_WAIT_POLICY=PASSIVE"},
                                        {"2t-openblas1", 2, installed + " OPENBLAS_NUM_THREADS=1"}};
  if (our_core.empty() || our_core == "reference" || (user_core && our_core == user_core)) return settings;
  for (size_t i = 0; i < 3; ++i) {
    TorchSetting s = settings[i];
    s.name += "+" + our_core;
    s.env = "OPENBLAS_CORETYPE=" + our_core + s.env.substr(installed.size());
    s.same_kernels = true;
    settings.push_back(s);
  }
  return settings;
}

std::optional<std::string> find_torch_python(std::string* why) {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("TOWERJIT_BENCH_PYTHON"); p && *p) candidates.push_back(p);
  candidates.push_back("/usr/bin/python3");
  candidates.push_back("python3");
  std::string tried;
  for (const std::string& py : candidates) {
    const std::string probe = "'" + py + "' -c 'import torch' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return py;
    tried += (tried.empty() ? "" : ", ") + py;
  }
  if (why) *why = "no python3 that imports torch (tried " + tried + "); install python3-torch";
  return std::nullopt;
}

std::string capture(const std::string& command, int* status) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  std::string out;
  if (!pipe) { *status = -1; return out; }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe.get())) > 0) out.append(buf.data(), n);
  *status = pclose(pipe.release());
  return out;
}

TorchResults run_torch(const std::string& python, const std::string& script,
                       const std::vector<TorchSetting>& settings,
                       const std::vector<std::string>& workloads, int steps, int warmup,
                       const std::string& args) {
  TorchResults results;
  // Messages name the script (torch_baseline.py, or a peer's, e.g. jax_baseline.py).
  const std::string who = script.substr(script.find_last_of('/') + 1);
  // The OpenBLAS variables towerjit set in this process are not the user's: unset first.
  std::string unset;
  for (const std::string& name : towerjit::cpujit::blas().variables_set) unset += "-u " + name + " ";
  for (const TorchSetting& s : settings) {
    std::string cmd = "env " + unset + s.env + " '" + python + "' '" + script + "' --threads " +
                      std::to_string(s.threads) + " --steps " + std::to_string(steps) +
                      " --warmup " + std::to_string(warmup) + (args.empty() ? "" : " " + args);
    for (const std::string& w : workloads) cmd += " --workload " + w;
    int status = 0;
    const std::string out = capture(cmd, &status);
    size_t pos = 0;
    while (pos < out.size()) {
      const size_t end = out.find('\n', pos);
      const std::string line = out.substr(pos, end == std::string::npos ? end : end - pos);
      pos = end == std::string::npos ? out.size() : end + 1;
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.contains("workload")) {
        if (!line.empty()) std::cerr << "towerjit_bench: " << who << " (" << s.name << "): " << line << "\n";
        continue;
      }
      results[s.name][j["workload"].get<std::string>()] =
          TorchResult{j["step_ms"], j["step_ms_min"], j["step_ms_max"], j["samples_per_s"],
                      j.value("first_step_ms", 0.0), j.value("cpu_capability", std::string()),
                      j.value("attention", std::string())};
    }
    if (status != 0) std::cerr << "towerjit_bench: " << who << " (" << s.name << ") exited " << status << "\n";
  }
  return results;
}

}  // namespace towerjit::bench
