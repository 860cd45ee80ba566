// Today's peers of towerjit_bench, besides Debian's PyTorch (bench/torch_runner.h): PyTorch 2.x
// eager and torch.compile (bench/torch_baseline.py --mode eager|compile) and JAX's jax.jit
// (bench/jax_baseline.py), each run as a subprocess of a Python that has it, at 1 and at 2
// threads; the benchmark compares with each peer's best setting, measured in the same run.
// scripts/install-peers.sh installs them; a peer that is not there is named with the reason.
#pragma once

#include <string>
#include <vector>

#include "bench/torch_runner.h"

namespace towerjit::bench {

struct Peer {
  std::string name;         // "torch-eager", "torch-compile", "jax"
  std::string python;       // the interpreter that has it; empty when unavailable
  std::string script;       // the baseline script it runs
  std::string args;         // more arguments for the script, e.g. "--mode compile"
  std::string version;      // as the probe found it: "torch 2.15.0+cu132", "jax 0.10.2"
  std::string unavailable;  // why it cannot run here; empty when it can
  std::vector<TorchSetting> settings;  // "1t" and "2t"
};

// The peers' names, in the order the benchmark runs them.
std::vector<std::string> peer_names();

// One line of bench/peer_probe.py's output for one Python, as the peers read it.
struct PythonProbe {
  std::string python;
  std::string torch, torch_error;  // torch's version, or why it does not import
  std::string jax, jax_error;
  bool cxx = false;  // a C++ compiler on PATH, for Inductor
};

// Parses one probe line; `python` names the interpreter when the line cannot be read.
PythonProbe parse_probe(const std::string& python, const std::string& line);

// Picks each named peer's Python from the probes, in order (the first that has it wins):
// torch-eager and torch-compile need torch 2 or later (and torch-compile a C++ compiler), jax
// needs jax. A peer that no probe offers gets `unavailable` naming what each Python lacked.
std::vector<Peer> choose_peers(const std::vector<PythonProbe>& probes, const std::vector<std::string>& names,
                               const std::string& bench_dir);

// The candidates: $TOWERJIT_BENCH_PEER_PYTHON, python3 on PATH, /usr/bin/python3; each probed.
std::vector<PythonProbe> probe_pythons(const std::string& bench_dir);

}  // namespace towerjit::bench
