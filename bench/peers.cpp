#include "bench/peers.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>

#include <nlohmann/json.hpp>

#include "dsl/error.h"

namespace towerjit::bench {

std::vector<std::string> peer_names() { return {"torch-eager", "torch-compile", "jax"}; }

PythonProbe parse_probe(const std::string& python, const std::string& line) {
  PythonProbe p;
  p.python = python;
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    p.torch_error = p.jax_error = "the probe printed no JSON" + (line.empty() ? std::string() : ": " + line.substr(0, 200));
    return p;
  }
  auto field = [&](const char* k) { return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string(); };
  p.torch = field("torch");
  p.torch_error = field("torch_error");
  p.jax = field("jax");
  p.jax_error = field("jax_error");
  p.cxx = j.contains("cxx") && j["cxx"].is_string();
  // The interpreter itself (a pyenv shim resolves to it), so the runs skip the shim.
  if (const std::string exe = field("python"); !exe.empty()) p.python = exe;
  return p;
}

namespace {

int major_version(const std::string& version) {
  return version.empty() || !std::isdigit(static_cast<unsigned char>(version[0])) ? -1 : std::atoi(version.c_str());
}

}  // namespace

std::vector<Peer> choose_peers(const std::vector<PythonProbe>& probes, const std::vector<std::string>& names,
                               const std::string& bench_dir) {
  const std::vector<std::string> known = peer_names();
  std::vector<Peer> peers;
  for (const std::string& name : names) {
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw Error("towerjit_bench: unknown peer \"" + name + "\"; choose among torch-eager, torch-compile, jax");
    Peer peer{.name = name, .settings = {{"1t", 1, ""}, {"2t", 2, ""}}};
    const bool jax = name == "jax";
    peer.script = bench_dir + (jax ? "/jax_baseline.py" : "/torch_baseline.py");
    if (name == "torch-compile") peer.args = "--mode compile";
    std::string lacks;
    for (const PythonProbe& p : probes) {
      std::string why;
      if (jax) {
        if (p.jax.empty()) why = "cannot import jax (" + p.jax_error + ")";
      } else if (p.torch.empty()) {
        why = "cannot import torch (" + p.torch_error + ")";
      } else if (major_version(p.torch) < 2) {
        why = "torch " + p.torch + ", older than 2";
      } else if (name == "torch-compile" && !p.cxx) {
        why = "torch " + p.torch + " but no C++ compiler on PATH for Inductor";
      }
      if (why.empty()) {
        peer.python = p.python;
        peer.version = jax ? "jax " + p.jax : "torch " + p.torch;
        break;
      }
      lacks += (lacks.empty() ? "" : "; ") + p.python + ": " + why;
    }
    if (peer.python.empty())
      peer.unavailable = "no Python has it (" + (lacks.empty() ? std::string("none found") : lacks) +
                         "); scripts/install-peers.sh installs it";
    peers.push_back(std::move(peer));
  }
  return peers;
}

std::vector<PythonProbe> probe_pythons(const std::string& bench_dir) {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("TOWERJIT_BENCH_PEER_PYTHON"); p && *p) candidates.push_back(p);
  candidates.push_back("python3");
  candidates.push_back("/usr/bin/python3");
  std::vector<PythonProbe> probes;
  std::set<std::string> seen;
  for (const std::string& py : candidates) {
    if (!seen.insert(py).second) continue;
    int status = 0;
    const std::string out = capture("'" + py + "' '" + bench_dir + "/peer_probe.py' 2>/dev/null", &status);
    const std::string line = out.substr(0, out.find('\n'));
    PythonProbe probe = status == 0 ? parse_probe(py, line)
                                    : parse_probe(py, "{\"torch_error\": \"the probe exited " + std::to_string(status) +
                                                          "\", \"jax_error\": \"the probe exited " +
                                                          std::to_string(status) + "\"}");
    // Two names for one interpreter (python3 on PATH is often /usr/bin/python3): probed once.
    if (probe.python != py && !seen.insert(probe.python).second) continue;
    probes.push_back(std::move(probe));
  }
  return probes;
}

}  // namespace towerjit::bench
