// The host reducer (PyTorch DDP's reducer, on CPU memory): what a synchronous step applies,
// formed from every tower's outputs by a fixed list of stages chosen once, at construction:
//
//   0. concatenation of sparse gradients (CompiledTowers::sparse; runtime/towers/sparse_reduction.h):
//      every tower's rows and values joined in world tower order, all-gathered across
//      processes; the later stages pass over them;
//   1. layout-ordered gather (TOWERJIT_DETERMINISTIC=layout, several processes): every
//      process's towers' outputs are gathered and the rest runs on the world's towers, in world
//      tower order, as one process would (P/2 times a ring all-reduce's traffic);
//   2. in-process sum: sum_i w_i g_i for every gradient, in double, in tower order (so a step is
//      bitwise reproducible), the elements cut over the tower threads; the model updates and
//      the loss by the slices' shares n_i / B;
//   3. all-reduce across processes (several processes, no gather): the gradients are cut into
//      buckets (runtime/towers/gradient_buckets.h, last layers first); each bucket's sum is
//      started through the transport as soon as stage 2 has summed it, so the next bucket is
//      summed while the last one travels; then the model updates and the loss. With
//      TowerStrategyOptions::gradient_compression, each bucket travels rounded to bf16 or f16
//      and is summed in that format (half the bytes), then widened back.
//
// With one process only stage 2 runs. The GPU-resident strategy has the same stages on the
// GPUs (runtime/towers/gpu_resident_sync.h: the in-device sum, NCCL between GPUs, MPI between
// processes). Every strategy that reduces in host memory calls reduce().
#pragma once

#include <memory>
#include <vector>

#include "runtime/towers/tower_state.h"

namespace towerjit::detail {

struct Reduced {
  HostFeeds gradients;  // the apply's feeds: each reduced gradient, and the scale (1)
  std::vector<HostTensor> model_updates;
  double loss = 0;
};

class Reducer {
 public:
  // `deterministic_layout`: gather, then sum in world order; `bucket_bytes`: stage 3's bucket cap.
  Reducer(TowerState& state, bool deterministic_layout, int64_t bucket_bytes);
  ~Reducer();
  // `outputs`: this process's towers' (or, from one process, any set of tower runs);
  // `weights` and `shares`: of the world's towers (of `outputs` when alone), in order.
  // Errors (at `loc`, the user's step or fit): a transport failure across processes.
  Reduced reduce(std::vector<TowerOutputs> outputs, const std::vector<double>& weights,
                 const std::vector<double>& shares, Loc loc);

 private:
  struct Exchange;
  std::vector<TowerOutputs> gather(const std::vector<TowerOutputs>& outputs);
  void sum(const std::vector<TowerOutputs>& outputs, const std::vector<double>& weights, const std::vector<int>& which,
           const std::vector<float*>& into);
  void plan(const std::vector<TowerOutputs>& outputs);
  void sum_and_exchange(const std::vector<TowerOutputs>& outputs, const std::vector<double>& w,
                        const std::shared_ptr<Exchange>& exchange,
                        Reduced& r);

  TowerState& state_;
  const bool gather_first_;  // stage 1
  const bool across_;        // stage 3
  const DType compression_;  // stage 3's wire: f32, or bf16 / f16 (TowerStrategyOptions::gradient_compression)
  const int64_t bucket_bytes_;
  std::vector<std::vector<int>> buckets_;  // gradient indices summed (and all-reduced) together
};

}  // namespace towerjit::detail
