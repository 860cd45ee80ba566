// One compiled program on one device, whichever backend runs it: CpuProgram for cpu(i),
// CudaProgram for gpu(i). The tower runtime holds its towers' programs through this, so a
// tower set may be CPU towers, GPU towers, or both; feeds, variables and fetches are host
// tensors either way.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dsl/devices.h"
#include "dsl/tensor.h"
#include "jit/kir/kernel_ir.h"
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

  // The optimised graph and the kernel IR it was compiled from, and its name (dump stem).
  virtual const Graph& lowered_graph() const = 0;
  virtual const kir::Program& program() const = 0;
  virtual const std::string& name() const = 0;

  // Compiles what `fetches` need for `device` (no update ops). A CPU program splits its work
  // over `pool` (none: the calling thread); `name` names its dumps. Errors (towerjit::Error at
  // `loc`): a GPU the machine does not have ("no CUDA device ...").
  static std::unique_ptr<DeviceProgram> compile(const Graph& graph, const std::vector<Tensor>& fetches,
                                                const Device& device, ThreadPool* pool = nullptr,
                                                const std::string& name = "program", Loc loc = Loc::current());
};

}  // namespace towerjit
