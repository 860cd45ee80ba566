#include "jit/cuda/module_parts.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <thread>

#include "dsl/error.h"
#include "jit/knobs.h"

namespace towerjit::cuda {
namespace {

// The cores this thread may run on (taskset, a Slurm allocation): the compile's threads share them.
int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

// A part's text: which part it is (not of how many: a kernel added at the end leaves the
// earlier parts' text, and so their cache entries, as they were), the prelude, its kernels.
std::string part_source(const CudaModule& module, const std::string& module_name, const std::vector<int>& kernels,
                        size_t index) {
  std::string text = "// part " + std::to_string(index) + " of CUDA module \"" +
                     module_name + "\" (module_parts.h)\n\n" + module.prelude;
  for (int k : kernels) text += module.kernel_sources[k];
  return text;
}

void write_dump(const std::string& dir, const std::string& name, const std::string& text) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + name, std::ios::binary) << text;
}

}  // namespace

std::string part_name(const std::string& module_name, size_t part) {
  return module_name + ".part" + std::to_string(part);
}

std::string module_of_part(const std::string& name) {
  const size_t dot = name.rfind(".part");
  if (dot == std::string::npos || dot + 5 == name.size()) return name;
  for (size_t i = dot + 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return name;
  return name.substr(0, dot);
}

std::vector<std::vector<int>> cut_into_parts(const CudaModule& module) {
  internal_check(module.kernel_sources.size() == module.kernels.size())
      << "CUDA module with " << module.kernels.size() << " kernels but " << module.kernel_sources.size() << " texts";
  std::vector<std::vector<int>> parts;
  size_t bytes = kPartBytes;  // a full part: the first kernel starts one
  for (size_t k = 0; k < module.kernel_sources.size(); ++k) {
    if (bytes >= kPartBytes) {
      parts.emplace_back();
      bytes = 0;
    }
    parts.back().push_back(static_cast<int>(k));
    bytes += module.kernel_sources[k].size();
  }
  return parts;
}

std::string CompiledCudaModule::ptx() const {
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i)
    text += "// part " + std::to_string(i) + " of " + std::to_string(parts.size()) + "\n" + parts[i].ptx;
  return text;
}

CompiledCudaModule compile_cuda_module(const CudaModule& module, const std::string& module_name,
                                       const std::string& arch) {
  const auto start = std::chrono::steady_clock::now();
  if (auto dump = knobs::dump_dir()) write_dump(*dump, module_name + ".cu", module.source);
  const std::vector<std::vector<int>> cut = cut_into_parts(module);
  CompiledCudaModule c;
  c.parts.resize(cut.size());
  c.part_of_kernel.resize(module.kernels.size());
  std::vector<std::string> sources;
  for (size_t i = 0; i < cut.size(); ++i) {
    sources.push_back(part_source(module, module_name, cut[i], i));
    for (int k : cut[i]) c.part_of_kernel[k] = static_cast<int>(i);
  }
  // Parts go to the threads in order, each taking the next one left; an error is kept and
  // thrown once all have finished, so no thread outlives this call.
  std::vector<std::exception_ptr> errors(cut.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < cut.size(); i = next++) {
      try {
        c.parts[i] = compile_cuda_undumped(sources[i], part_name(module_name, i), arch);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> helpers;
  const size_t threads = std::min<size_t>(cut.size(), static_cast<size_t>(usable_cores()));
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& h : helpers) h.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  for (const CudaBinary& part : c.parts) c.cache_hit = c.cache_hit && part.cache_hit;
  if (auto dump = knobs::dump_dir()) write_dump(*dump, module_name + ".ptx", c.ptx());
  c.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return c;
}

}  // namespace towerjit::cuda
