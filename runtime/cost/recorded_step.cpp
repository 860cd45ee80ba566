#include "runtime/cost/recorded_step.h"

#include <dlfcn.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dsl/error.h"
#include "jit/cuda/module_parts.h"
#include "jit/knobs.h"

namespace towerjit::cost {
namespace {

using nlohmann::json;

// "3136*B+40", "512" at B = batch.
double affine_at(const std::string& text, int64_t batch) {
  const auto star = text.find("*B");
  if (star == std::string::npos) return std::stod(text);
  double v = std::stod(text.substr(0, star)) * static_cast<double>(batch);
  const auto plus = text.find('+', star);
  if (plus != std::string::npos) v += std::stod(text.substr(plus + 1));
  return v;
}

struct KernelIndex {
  double bytes = 0;
  int ops = 0;
  bool reduces = false;
  double bytes_per_point = 0;  // bytes that scale with the recorded points instead (a combine pass)
  double bytes_per_tail_point = 0;  // the same for the tail's (a one-pass reduction's fold)
};

// module -> kernel -> what its index says, read once a module.
class Indexes {
 public:
  Indexes(std::string dir, int64_t batch) : dir_(std::move(dir)), batch_(batch) {}
  const KernelIndex& kernel(const std::string& module, const std::string& name) {
    auto& m = modules_[module];
    if (m.empty()) {
      const std::string path = dir_ + "/" + module + ".index.json";
      std::ifstream in(path);
      if (!in)
        throw Error("towerjit: cost model: no index " + path + " for the kernels of program \"" + module +
                    "\"; record with TOWERJIT_DUMP set to the directory given (prepare_emulated_gpu does)");
      const json index = json::parse(in);
      for (const json& step : index["steps"]) {
        if (step["kind"] != "kernel") continue;
        KernelIndex k;
        k.bytes = affine_at(step["bytes_read"], batch_) + affine_at(step["bytes_written"], batch_);
        k.ops = static_cast<int>(step["ops"].size()) * step.value("evaluations", 1);
        k.reduces = step.contains("reduce");
        // A one-pass reduction's last block reads each partial once (TJ_TAIL_WORK(1) a partial),
        // the partials' traffic of both of its halves, as a combine pass's below.
        if (step.contains("launch") && step["launch"].contains("split"))
          k.bytes_per_tail_point = 2.0 * step["launch"]["split"].value("partial_bytes", 0);
        m[step["name"]] = k;
        // A split reduction's pass 2 (jit/cuda/reduction_writer.h): it reads each partial once,
        // counted as its work (TJ_WORK(1) a partial), and stands for the partials' traffic of
        // both passes: pass 1 wrote as many. (The outputs' stores move from pass 1 to pass 2;
        // the index counts them once, in pass 1's bytes.)
        if (step.contains("launch") && step["launch"].contains("split")) {
          const json& split = step["launch"]["split"];
          const std::string combine = split.value("combine", "");
          if (!combine.empty())
            m[combine] = KernelIndex{.bytes = 0, .ops = 0, .reduces = true,
                                     .bytes_per_point = 2.0 * split.value("partial_bytes", 0)};
        }
      }
    }
    auto it = m.find(name);
    if (it == m.end())
      throw Error("towerjit: cost model: the index of program \"" + module + "\" has no kernel " + name);
    return it->second;
  }

 private:
  std::string dir_;
  int64_t batch_;
  std::map<std::string, std::map<std::string, KernelIndex>> modules_;
};

void* emulator_symbol(const char* name) {
  void* handle = ::dlopen(knobs::emulator_library().c_str(), RTLD_NOW | RTLD_NOLOAD);
  void* f = handle ? ::dlsym(handle, name) : nullptr;
  if (!f)
    throw Error(std::string("towerjit: cost model: the emulated GPU's library is not loaded (") + name +
                " not found); run the step with TOWERJIT_CUDA=emulator (prepare_emulated_gpu)");
  return f;
}

}  // namespace

void prepare_emulated_gpu(const GpuSpec& gpu, const std::string& dump_dir, int memory_mb) {
  setenv("TOWERJIT_CUDA", "emulator", 1);
  setenv("TOWERJIT_EMULATED_GPU_SMS", std::to_string(gpu.sms).c_str(), 1);
  setenv("TOWERJIT_DUMP", dump_dir.c_str(), 1);
  // The model prices cuDNN's calls; on the emulator cuDNN's stand-in wins every race with the
  // implicit GEMM anyway (runtime/cuda/conv_choice.h), and timing the implicit GEMM there runs
  // it on the host: 47 s of the cnn's first step at batch 512. So it is not timed.
  if (!std::getenv("TOWERJIT_CONV_IMPLICIT_GEMM")) setenv("TOWERJIT_CONV_IMPLICIT_GEMM", "off", 1);
  if (!std::getenv("TOWERJIT_EMULATED_GPU_MB")) setenv("TOWERJIT_EMULATED_GPU_MB", std::to_string(memory_mb).c_str(), 1);
}

std::vector<Launch> launches_from_records(const std::string& json_lines, const std::string& dump_dir, int64_t batch) {
  Indexes indexes(dump_dir, batch);
  std::vector<Launch> out;
  std::istringstream lines(json_lines);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const json r = json::parse(line);
    Launch l;
    l.kind = r["kind"];
    l.name = r["name"];
    // A program's module compiles in parts (jit/cuda/module_parts.h); a launch counts as its program's.
    l.module = cuda::module_of_part(r["module"]);
    const auto& g = r["grid"];
    const auto& b = r["block"];
    l.blocks = g[0].get<int64_t>() * g[1].get<int64_t>() * g[2].get<int64_t>();
    l.threads_per_block = b[0].get<int64_t>() * b[1].get<int64_t>() * b[2].get<int64_t>();
    l.shared_bytes = r["static_shared_bytes"].get<int64_t>() + r["dynamic_shared_bytes"].get<int64_t>();
    l.work_max = r["work_max"];
    l.work_mean = r["work_mean"];
    l.tail_work_max = r.value("tail_work_max", uint64_t{0});
    l.tail_points = r.value("tail_work_sum", 0.0);
    l.bytes = r["bytes"];
    l.flops = r["flops"];
    l.gemm_m = r["gemm"][0], l.gemm_n = r["gemm"][1], l.gemm_k = r["gemm"][2], l.gemm_batch = r["gemm"][3];
    l.half_operands = r.value("half_operands", false);
    l.host_link = r["host_link"];
    l.graph = r.value("graph", false);
    if (l.kind == "kernel" && l.name.rfind("tj_", 0) != 0) {  // a loop kernel of a program
      const KernelIndex& k = indexes.kernel(l.module, l.name);
      l.bytes = k.bytes + k.bytes_per_point * l.points() + k.bytes_per_tail_point * l.tail_points;
      l.reduces = k.reduces;
      l.flops = l.points() * k.ops;
    }
    out.push_back(std::move(l));
  }
  return out;
}

std::vector<Launch> record_step(TowerTrainer& trainer, const HostFeeds& feeds, const std::string& dump_dir,
                                int64_t batch) {
  auto start = reinterpret_cast<void (*)()>(emulator_symbol("tj_emu_launch_log_start"));
  auto stop = reinterpret_cast<const char* (*)()>(emulator_symbol("tj_emu_launch_log_stop"));
  auto synchronize = reinterpret_cast<int (*)()>(emulator_symbol("cuCtxSynchronize"));
  synchronize();
  start();
  trainer.step(feeds);
  synchronize();  // every stream's work of the step has run, so has been recorded
  const std::string records = stop();
  return launches_from_records(records, dump_dir, batch);
}

}  // namespace towerjit::cost
