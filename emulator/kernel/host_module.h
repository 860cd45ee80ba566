// A CUDA C module compiled for the host: the exact source NVRTC is given, through a small
// textual pre-pass (prepare_host_source) and g++ with the emulation header (cuda_host.h), into
// a shared object whose kernels block_scheduler.h runs. Built objects are kept in the compile
// cache (keyed by the source, the header, the compiler and its flags), as every compile is.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "emulator/kernel/block_scheduler.h"

namespace towerjit::emulator {

// What the pre-pass makes of a module's source: the text g++ compiles (the same lines, so a
// fault's line number is the dumped .cu's), with a launch entry per kernel appended.
struct HostSource {
  std::string text;
  std::vector<std::string> kernels;  // extern "C" __global__ functions, in source order
};

// Rewrites what a host compiler cannot take as CUDA has it: `__shared__ T name[N];` becomes a
// reference into the block's shared memory, `extern __shared__ T name[];` a pointer to its
// dynamic part, and reinterpret_cast to float4 / float2 pointers a checked cast; appends
// `extern "C" void <kernel>__tj_entry(void** params)` for every kernel. Throws Fault on a
// kernel signature it cannot read.
HostSource prepare_host_source(const std::string& cuda_source);

class HostModule {
 public:
  // Compiles (or finds in the cache) and loads `cuda_source`. `name` names the module in
  // messages. Throws Fault with the compiler's message when g++ rejects it.
  static std::shared_ptr<HostModule> compile(const std::string& cuda_source, const std::string& name);
  ~HostModule();

  struct Param {
    int bytes;
    bool pointer;
  };
  struct Kernel {
    KernelEntry entry = nullptr;
    std::vector<Param> params;
  };
  // Kernel `name` (its launch entry and parameters), or null when the module has none.
  const Kernel* kernel(const std::string& name) const;
  // Its launch entry, or null.
  KernelEntry entry(const std::string& name) const;
  const std::vector<std::string>& kernels() const { return kernels_; }
  const std::string& name() const { return name_; }
  bool from_cache() const { return from_cache_; }

 private:
  HostModule() = default;
  void* handle_ = nullptr;
  std::string name_;
  std::vector<std::string> kernels_;
  std::map<std::string, Kernel> entries_;
  bool from_cache_ = false;
};

}  // namespace towerjit::emulator
