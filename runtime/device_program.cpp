#include "runtime/device_program.h"

#include <type_traits>
#include <utility>

#include "runtime/cpu/cpu_program.h"
#include "runtime/cuda/cuda_program.h"

namespace towerjit {
namespace {

// A program of either backend; both run host feeds and host variables the same way.
template <typename Program>
class On : public DeviceProgram {
 public:
  template <typename... Args>
  explicit On(Args&&... args) : program_(std::forward<Args>(args)...) {}
  std::vector<HostTensor> run(const HostFeeds& feeds, HostVariables& variables, uint64_t step) override {
    return program_.run(feeds, variables, step);
  }
  const Graph& lowered_graph() const override { return program_.lowered_graph(); }
  const kir::Program& program() const override { return program_.program(); }
  const std::string& name() const override { return program_.name(); }
  CudaProgram* cuda() override {
    if constexpr (std::is_same_v<Program, CudaProgram>) return &program_;
    return nullptr;
  }

 private:
  Program program_;
};

}  // namespace

std::unique_ptr<DeviceProgram> DeviceProgram::compile(const Graph& graph, const std::vector<Tensor>& fetches,
                                                      const Device& device, ThreadPool* pool,
                                                      const std::string& name, Loc loc) {
  if (device.kind == DeviceKind::gpu)
    return std::make_unique<On<CudaProgram>>(graph, fetches, /*run_update_ops=*/false, device, name, loc);
  return std::make_unique<On<CpuProgram>>(graph, fetches, /*run_update_ops=*/false, pool, name);
}

}  // namespace towerjit
