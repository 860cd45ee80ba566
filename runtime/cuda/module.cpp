#include "runtime/cuda/module.h"

#include <algorithm>
#include <limits>

#include "dsl/error.h"

namespace towerjit::cuda {

LoadedModule::LoadedModule(DeviceContext& device, const cuda::CudaBinary& binary, const std::string& name,
                           std::source_location loc)
    : device_(&device), name_(name) {
  const DriverApi& api = require_driver(loc);
  device.make_current();
  CuResult r = api.ModuleLoadData(&module_, binary.cubin.data());
  if (r == kCudaErrorNoBinaryForGpu && !binary.ptx.empty()) {
    // A cubin for another architecture (TOWERJIT_CUDA_ARCH set to one the device is not): let
    // the driver compile the PTX, which runs on that architecture and every later one.
    r = api.ModuleLoadData(&module_, binary.ptx.c_str());
  }
  std::string hint;
  if (r == kCudaErrorNoBinaryForGpu)
    hint = "; the code is for another architecture than the device's: unset TOWERJIT_CUDA_ARCH or set it to " +
           device.arch();
  if (r == kCudaErrorUnsupportedPtxVersion)
    hint = "; the driver (CUDA " + std::to_string(require_driver().driver_version / 1000) + "." +
           std::to_string(require_driver().driver_version % 1000 / 10) + ") is older than NVRTC " +
           cuda::nvrtc_version() + ", which compiled the code: update the NVIDIA driver";
  check_cuda(r, "cuModuleLoadData",
             " loading CUDA module \"" + name + "\" compiled for " + binary.arch + " on " + device.str() + hint, loc);
}

LoadedModule::~LoadedModule() {
  if (!module_) return;
  try {
    const DriverApi& api = require_driver();
    api.CtxSetCurrent(device_->context());
    api.ModuleUnload(module_);
  } catch (...) {
  }
}

CUfunction LoadedModule::function(const std::string& symbol) const {
  CUfunction f = nullptr;
  device_->make_current();
  const CuResult r = require_driver().ModuleGetFunction(&f, module_, symbol.c_str());
  internal_check(r == kCudaSuccess && f) << "CUDA module \"" << name_ << "\" has no kernel " << symbol << " ("
                                         << cuda_result_text(r) << ")";
  return f;
}

void launch(CUfunction kernel, int64_t grid, int block, const Stream& stream, void** params,
            const std::string& what, std::source_location loc) {
  internal_check(grid >= 1 && grid <= std::numeric_limits<int32_t>::max() && block >= 1 && block <= 1024)
      << "launch of " << what << " with " << grid << " blocks of " << block << " threads";
  const CuResult r = require_driver().LaunchKernel(kernel, static_cast<unsigned>(grid), 1, 1, static_cast<unsigned>(block),
                                                   1, 1, 0, stream.handle(), params, nullptr);
  check_cuda(r, "cuLaunchKernel", " launching " + what + " (" + std::to_string(grid) + " blocks of " +
                                      std::to_string(block) + " threads on " + stream.device().str() + ")",
             loc);
}

int64_t grid_for(int64_t work, int block, const DeviceContext& device) {
  const int64_t blocks = (work + block - 1) / block;
  return std::clamp<int64_t>(blocks, 1, std::max<int64_t>(1, int64_t{32} * device.sm_count()));
}

}  // namespace towerjit::cuda
