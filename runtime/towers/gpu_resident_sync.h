// Sync towers that are all GPUs, with the variables kept on the GPUs (TOWERJIT_GPU_VARIABLES=on):
// one copy of every variable (weights, optimiser slots, EMA shadows) per GPU, shared by the
// towers on that GPU. A step:
//   1. each tower runs forward and backward from its GPU's copy; its gradients (and the
//      model's own updates, batch norm's moving means) stay on the GPU;
//   2. on each GPU a reduce program compiled by towerjit (one fused pass) forms Σ w_i · g_i
//      over the towers on it — the in-device reduction for towers sharing a GPU;
//   3. with several GPUs, an NCCL all-reduce of the per-GPU sums (one communicator per GPU,
//      one grouped call); without NCCL (or with TOWERJIT_NCCL=off) the sums meet on the first
//      GPU, are added there in GPU order and copied back;
//   4. every GPU applies the optimiser to its copy; the model updates replace their variables.
// Only each tower's loss and the learning rate cross to the host; the host copy of the
// variables is refreshed when asked for (download()).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dsl/devices.h"
#include "dsl/tensor.h"
#include "runtime/cuda/cuda_program.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/cuda/nccl.h"

namespace towerjit {

class GpuResidentSync {
 public:
  struct Setup {
    const Graph* apply_graph = nullptr;  // the graph cut at the collectives (jit/passes/cut_collectives.h)
    std::vector<Tensor> apply_fetches;   // the learning rate
    std::vector<Tensor> apply_updates;
    std::vector<CudaProgram*> towers;    // each tower's forward+backward program: loss, gradients, model updates
    std::vector<std::string> gradient_inputs;  // the apply's gradient inputs, in the towers' fetch order
    std::string gradient_scale;          // the apply's scale input (1 here: the weights are in the sum)
    std::vector<std::string> model_update_variables;  // in the towers' fetch order, after the gradients
  };
  // Compiles the reduce and apply programs for every GPU of `setup.towers` and copies
  // `initial` to each.
  GpuResidentSync(const Setup& setup, const HostVariables& initial, Loc loc);
  ~GpuResidentSync();

  struct Result {
    std::vector<double> losses;  // per tower
    double learning_rate = 0;
  };
  // One step: tower t trains on `slices[t]` (on the thread `on_towers` gives it, as
  // on_towers(count, body) calls body(t) for every t); gradients are weighted by
  // `weights[t]`, model updates by `update_weights[t]`; `key(t)` keys tower t's random numbers.
  Result step(const std::vector<HostFeeds>& slices, const std::vector<double>& weights,
              const std::vector<double>& update_weights, const std::function<uint64_t(int)>& key,
              const std::function<void(int, const std::function<void(int)>&)>& on_towers);

  // The first GPU's copy of every variable, into `values` (all copies are equal).
  void download(HostVariables& values) const;
  // Replaces every GPU's copy.
  void upload(const HostVariables& values);

 private:
  struct Gpu;  // one GPU's variables, reduce and apply programs
  void step_reduce(Gpu& gpu, std::vector<std::vector<DeviceTensor>>& outputs,
                      const std::vector<double>& weights, const std::vector<double>& update_weights);
  void all_reduce_gpus();
  void combine_gpus();
  void apply(Gpu& gpu, Result& result);

  Setup setup_;
  std::vector<int> gpu_of_tower_;  // index into gpus_
  std::vector<std::unique_ptr<cuda::PinnedBuffer>> loss_staging_;  // per tower
  std::vector<std::unique_ptr<Gpu>> gpus_;
  std::unique_ptr<cuda::NcclCommunicators> nccl_;  // several GPUs, NCCL present
  std::unique_ptr<CudaProgram> combine_;  // else, on the first GPU: the sum of every GPU's reduced tensors
  DeviceFeeds combine_feeds_;             // its weights (all 1), and each step's sums
  Loc loc_;
};

}  // namespace towerjit
