// Compiled CUDA code on a device: a module loaded from NVRTC's cubin (jit/cuda/nvrtc_compiler.h),
// its kernels, and launching them on a stream.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>

#include "jit/cuda/nvrtc_compiler.h"
#include "runtime/cuda/device.h"

namespace towerjit::cuda {

class LoadedModule {
 public:
  // Loads `binary` (its cubin; where the driver cannot run that, its PTX, which the driver
  // compiles for the device) on `device`. Throws towerjit::Error naming the module and the
  // architectures when neither loads.
  LoadedModule(DeviceContext& device, const cuda::CudaBinary& binary, const std::string& name,
               std::source_location loc = std::source_location::current());
  ~LoadedModule();
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;

  // The kernel `symbol`; throws an internal error when the module lacks it.
  CUfunction function(const std::string& symbol) const;
  const std::string& name() const { return name_; }

 private:
  DeviceContext* device_;
  CUmodule module_ = nullptr;
  std::string name_;
};

// Launches `kernel` with `grid` blocks of `block` threads (x only) on `stream`; `params`
// points at each argument's value, in order. `what` names the kernel (and the DSL ops it
// runs) in an error. Errors of the kernel itself show at the next synchronisation; with the
// driver's CUDA_LAUNCH_BLOCKING=1 they show here, naming the kernel.
void launch(CUfunction kernel, int64_t grid, int block, const Stream& stream, void** params,
            const std::string& what, std::source_location loc = std::source_location::current());

// Blocks for a grid-stride loop over `work` items: enough for one item per thread, at most
// 32 blocks per SM, at least 1.
int64_t grid_for(int64_t work, int block, const DeviceContext& device);

}  // namespace towerjit::cuda
