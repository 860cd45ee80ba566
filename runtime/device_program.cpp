#include "runtime/device_program.h"

#include "runtime/cpu/cpu_program.h"
#include "runtime/cuda/cuda_program.h"

namespace towerjit {
namespace {

class OnCpu : public DeviceProgram {
 public:
  OnCpu(const Graph& graph, const std::vector<Tensor>& fetches, ThreadPool* pool)
      : program_(graph, fetches, /*run_update_ops=*/false, pool) {}
  std::vector<HostTensor> run(const HostFeeds& feeds, HostVariables& variables, uint64_t step) override {
    return program_.run(feeds, variables, step);
  }

 private:
  CpuProgram program_;
};

class OnGpu : public DeviceProgram {
 public:
  OnGpu(const Graph& graph, const std::vector<Tensor>& fetches, const Device& device, Loc loc)
      : program_(graph, fetches, /*run_update_ops=*/false, device, loc) {}
  std::vector<HostTensor> run(const HostFeeds& feeds, HostVariables& variables, uint64_t step) override {
    return program_.run(feeds, variables, step);
  }

 private:
  CudaProgram program_;
};

}  // namespace

std::unique_ptr<DeviceProgram> DeviceProgram::compile(const Graph& graph, const std::vector<Tensor>& fetches,
                                                      const Device& device, ThreadPool* pool, Loc loc) {
  if (device.kind == DeviceKind::gpu) return std::make_unique<OnGpu>(graph, fetches, device, loc);
  return std::make_unique<OnCpu>(graph, fetches, pool);
}

}  // namespace towerjit
