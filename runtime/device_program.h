// One compiled program on one device, whichever backend runs it: CpuProgram for cpu(i),
// CudaProgram for gpu(i). The tower runtime holds its towers' programs through this, so a
// tower set may be CPU towers, GPU towers, or both; feeds, variables and fetches are host
// tensors either way.
#pragma once

#include <memory>
#include <vector>

#include "dsl/devices.h"
#include "dsl/tensor.h"
#include "runtime/host_tensor.h"
#include "runtime/thread_pool.h"

namespace towerjit {

class CudaProgram;

class DeviceProgram {
 public:
  virtual ~DeviceProgram() = default;
  // As CpuProgram::run and CudaProgram::run with host feeds and host variables (a GPU program
  // copies the variables up, and those its update ops write back down).
  virtual std::vector<HostTensor> run(const HostFeeds& feeds, HostVariables& variables, uint64_t step = 0) = 0;
  // The CUDA program underneath, for runtimes that keep tensors on the GPU; null on a CPU.
  virtual CudaProgram* cuda() { return nullptr; }

  // Compiles what `fetches` need for `device` (no update ops). A CPU program splits its work
  // over `pool` (none: the calling thread). Errors (towerjit::Error at `loc`): a GPU the
  // machine does not have ("no CUDA device ...").
  static std::unique_ptr<DeviceProgram> compile(const Graph& graph, const std::vector<Tensor>& fetches,
                                                const Device& device, ThreadPool* pool = nullptr,
                                                Loc loc = Loc::current());
};

}  // namespace towerjit
