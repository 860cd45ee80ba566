// Sync towers that are all GPUs, with the variables kept on the GPUs (TOWERJIT_GPU_VARIABLES=on):
// one copy of every variable (weights, optimiser slots, EMA shadows) per GPU, shared by the
// towers on that GPU. A step:
//   1. each tower's forward and backward is queued on its stream from its GPU's copy; its
//      gradients (and the model's own updates, batch norm's moving means) stay on the GPU,
//      each copied out as soon as the step finishing it has run;
//   2. the gradients are cut into buckets in the order the backward pass finishes them
//      (runtime/towers/gradient_buckets.h, TOWERJIT_BUCKET_MB, 25 MB as PyTorch DDP); as soon
//      as a bucket is ready on a GPU's towers, a reduce program compiled by towerjit (one fused
//      pass) forms Σ w_i · g_i over them on a stream of its own — the in-device reduction for
//      towers sharing a GPU — while the backward passes go on;
//   3. with several GPUs, each bucket is then all-reduced between the GPUs by NCCL on the same
//      stream (one communicator per GPU, grouped calls); without NCCL (or TOWERJIT_NCCL=off)
//      the sums meet on the first GPU once all are done, are added there in GPU order and
//      copied back;
//   4. in a world of several processes (mpirun), each bucket's sum is then all-reduced between
//      the processes over MPI (from the first GPU, through the host, back to every GPU), each
//      starting as soon as its reduction on the GPUs has run, while the backward passes go on:
//      the hierarchical scheme, NCCL inside the process, MPI between (docs/distributed.md); or,
//      with TOWERJIT_NCCL_WORLD=on where every process's NCCL can, one NCCL communicator over
//      every process's GPUs (bootstrapped over MPI), and no MPI step;
//   With gradient compression (Setup::compression bf16 or f16) and a collective to cross
//   (NCCL, MPI), each GPU's sum of a bucket's gradients is rounded to the format in its reduce
//   program, the collectives sum in the format (NCCL's bf16 / f16 all-reduce, the transport's
//   16-bit one), and a program per bucket widens the total to f32 for the apply: half the
//   gradients' bytes. The model's updates stay f32. The GPUs' sums meeting by copies (no NCCL)
//   add the 16-bit values in f32 and round once;
//   5. a sparse gradient (an embedding's rows and values, CompiledTowers::sparse) takes no
//      part in the buckets: once the towers have run, each tower's rows and values are copied
//      down, concatenated in world tower order on the host as host-memory towers do
//      (runtime/towers/sparse_reduction.h; all-gathered across processes), and copied to every
//      GPU's apply, whose sparse apply combines the rows;
//   6. every GPU applies the optimiser to its copy; the model's updates replace their variables.
//      Where the buckets' sums are complete on the device (one process, one GPU or NCCL, and no
//      sparse gradient), the
//      apply is queued at once behind them, its stream waiting for each bucket's event: the
//      host waits once a step, at its end, for the towers, the reductions and the apply
//      together. Where the host takes part (the GPUs' sums meeting by copies, MPI between
//      processes), it waits for the towers first, then for the apply.
//   7. fit() may queue a step behind the one before (queue(), where the sums stay on the GPUs
//      in one process): its towers wait on the GPU for that step's apply, and the host collects
//      that step while the new one runs.
// Only each tower's loss and the apply's scalars (the learning rate, the loss scale) cross to
// the host, copied into page-locked words behind their runs; the host copy of the variables is
// refreshed when asked for (download()).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dsl/devices.h"
#include "dsl/tensor.h"
#include "runtime/cuda/cuda_program.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/cuda/nccl.h"
#include "runtime/dist/transport.h"

namespace towerjit {

class GpuResidentSync {
 public:
  struct Setup {
    const Graph* apply_graph = nullptr;  // the graph cut at the collectives (jit/passes/cut_collectives.h)
    std::vector<Tensor> apply_fetches;   // the learning rate (and the loss scale, CompiledTowers)
    std::vector<Tensor> apply_updates;
    std::vector<CudaProgram*> towers;    // each tower's forward+backward program: loss, gradients, model updates
    std::vector<std::string> gradient_inputs;  // the apply's gradient inputs, in the towers' fetch order
    std::string gradient_scale;          // the apply's scale input (1 here: the weights are in the sum)
    std::vector<std::string> model_update_variables;  // in the towers' fetch order, after the gradients
    // The gradients that cross as rows and values: each one's index in gradient_inputs and the
    // apply's input for its rows; the towers fetch each one's rows after the model updates.
    struct Sparse {
      size_t gradient;
      std::string rows_input;
    };
    std::vector<Sparse> sparse;
    dist::Transport* world = nullptr;  // the processes (null or one: this process alone)
    double bucket_mb = 25;             // TowerStrategyOptions::bucket_mb, as resolved
    DType compression = DType::f32;    // TowerStrategyOptions::gradient_compression
  };
  // Compiles the reduce and apply programs for every GPU of `setup.towers` and copies
  // `initial` to each.
  GpuResidentSync(const Setup& setup, const HostVariables& initial, Loc loc);
  ~GpuResidentSync();

  struct Result {
    std::vector<double> losses;  // per tower
    std::vector<HostTensor> apply_fetched;  // the first GPU's apply's fetches (the learning rate, ...)
  };
  // Tower t's feeds: in host memory (copied up through its program's page-locked block on its
  // stream), or on its GPU already (runtime/towers/feed_prefetch.h), uploaded behind `uploaded`,
  // which its run then waits for.
  struct TowerFeeds {
    const HostFeeds* host = nullptr;
    const DeviceFeeds* device = nullptr;
    const cuda::Event* uploaded = nullptr;
  };
  // One step: tower t trains on `slices[t]` (on the thread `on_towers` gives it, as
  // on_towers(count, body) calls body(t) for every t); gradients are weighted by
  // `weights[t]`, model updates by `update_weights[t]`; `key(t)` keys tower t's random numbers.
  Result step(const std::vector<TowerFeeds>& slices, const std::vector<double>& weights,
              const std::vector<double>& update_weights, const std::function<uint64_t(int)>& key,
              const std::function<void(int, const std::function<void(int)>&)>& on_towers);

  // Steps one behind another (fit()'s, where overlaps()): queue() queues a step as step() does
  // and returns at once. Queued while another step is in flight, it first waits for that
  // step's towers on the host (wait_towers()), queues its own towers to wait on the GPU for that
  // step's apply, then waits for that step's reductions and apply and queues its own in their
  // place: the GPU goes from one step's apply to the next step's towers with no host round trip
  // between, and the host collects a step while the next one runs. Returns the results of the
  // step that was in flight, if any.
  std::optional<Result> queue(const std::vector<TowerFeeds>& slices, const std::vector<double>& weights,
                              const std::vector<double>& update_weights, const std::function<uint64_t(int)>& key,
                              const std::function<void(int, const std::function<void(int)>&)>& on_towers);
  // Waits for the towers of the step in flight: their losses (an error of theirs, such as an
  // index out of range, is raised here).
  std::vector<double> wait_towers();
  // Waits for the step in flight: its results.
  Result finish();
  bool in_flight() const { return in_flight_; }
  // Steps queued behind another so far, by every instance in the process (tests, the bench).
  static int64_t steps_queued_behind();
  // Whether a step may be queued behind another: every sum stays on the GPUs (one GPU or NCCL,
  // no sparse gradient), in one process.
  bool overlaps() const { return reduced_on_device() && !across_processes(); }

  // The first GPU's copy of every variable, into `values` (all copies are equal); a step in
  // flight is waited for first (its results stay to be collected).
  void download(HostVariables& values);
  // Replaces every GPU's copy.
  void upload(const HostVariables& values);
  // The first GPU's programs besides the towers': the buckets' reductions, the sum over GPUs
  // (without NCCL), the apply.
  std::vector<const CudaProgram*> programs() const;

 private:
  struct Gpu;  // one GPU's variables, reduce and apply programs
  void set_weights(Gpu& gpu, const std::vector<double>& weights, const std::vector<double>& update_weights);
  void queue_bucket(size_t b, std::vector<std::vector<DeviceTensor>>& outputs);
  void finish_all();
  void queue_loss(int t, const DeviceTensor& loss);
  void combine_gpus();
  bool across_processes() const { return setup_.world && setup_.world->size() > 1; }
  bool mpi_between_processes() const { return across_processes() && !nccl_world_; }
  void join_world_nccl(const std::vector<cuda::DeviceContext*>& contexts);
  void send_bucket(size_t b);
  void receive_buckets();
  void feed_sparse(const std::vector<std::vector<DeviceTensor>>& outputs, const std::vector<double>& weights);
  void widen_bucket(Gpu& gpu, size_t b);
  void feed_apply(Gpu& gpu);
  void apply(Gpu& gpu, Result& result);
  // Whether every bucket's sum is complete on the GPUs without the host (see step 5 above).
  bool reduced_on_device() const { return !combine_ && !mpi_between_processes() && setup_.sparse.empty(); }
  void queue_apply(Gpu& gpu);
  std::vector<HostTensor> applied(const Gpu& gpu) const;

  Setup setup_;
  std::vector<int> gpu_of_tower_;  // index into gpus_
  std::vector<std::unique_ptr<cuda::PinnedBuffer>> loss_staging_;  // per tower
  // The reduced tensors: the dense gradients, then the model's updates. Per tensor, its place
  // among the towers' fetches; per dense gradient, its index in setup_.gradient_inputs.
  std::vector<int> fetch_of_;
  std::vector<size_t> gradient_of_;
  std::vector<std::vector<int>> buckets_;  // reduced tensors per bucket
  std::vector<std::vector<std::unique_ptr<cuda::Event>>> ready_;  // per tower, per bucket
  std::vector<std::vector<cuda::Event*>> record_after_;  // per tower, per fetch: the bucket event it completes
  std::vector<std::unique_ptr<Gpu>> gpus_;
  std::unique_ptr<cuda::NcclCommunicators> nccl_;  // several GPUs, NCCL present
  std::unique_ptr<CudaProgram> combine_;  // else, on the first GPU: the sum of every GPU's reduced tensors
  DeviceFeeds combine_feeds_;             // its weights (all 1), and each step's sums
  bool nccl_world_ = false;  // nccl_ spans every process's GPUs (TOWERJIT_NCCL_WORLD)
  // The gradients' dtype in the collectives: Setup::compression where one crosses GPUs or
  // processes (NCCL, MPI), else f32.
  DType wire_ = DType::f32;
  // Across processes: each reduced tensor on its way, shared with its all-reduce, which may
  // outlive a wait that gave up on it (runtime/dist/transport.h).
  std::vector<std::shared_ptr<HostTensor>> host_;
  std::vector<dist::Transport::Ticket> across_;  // per bucket: its all-reduce
  // The step in flight (queue() returned, finish() not yet called): its towers' outputs and
  // weights, which finish() needs where the host takes part.
  bool in_flight_ = false;
  std::vector<std::vector<DeviceTensor>> outputs_;
  std::vector<double> weights_;
  Loc loc_;
};

// One GPU's share (gpu_resident_sync.cpp and gpu_resident_world.cpp both use it).
struct GpuResidentSync::Gpu {
  cuda::DeviceContext* context = nullptr;
  std::vector<int> towers;  // the towers on this GPU, in tower order
  DeviceVariables variables;
  std::vector<std::unique_ptr<CudaProgram>> reduce;  // per bucket: the towers' weighted sum
  std::vector<DeviceFeeds> reduce_feeds;  // per bucket: w<i>, m<i> (kept), and each step's tower outputs
  std::vector<double> uploaded;           // the weights now in reduce_feeds
  std::unique_ptr<CudaProgram> apply;
  std::unique_ptr<cuda::Stream> copies;
  DeviceFeeds apply_feeds;                // the scale (1), then the reduced and sparse gradients each step
  std::vector<DeviceTensor> reduced;      // per reduced tensor (dense gradients, then model updates)
  // Per bucket: the event after which its sum is complete on this GPU (the reduction's, after
  // NCCL's all-reduce where there is one; the tower's own where one tower's gradients are the
  // sum), and the reductions' events that it points at.
  std::vector<const cuda::Event*> bucket_done;
  std::vector<std::unique_ptr<cuda::Event>> reduced_events;
  // With compression, per bucket: the program widening its gradients' total to f32, its feeds,
  // and the event after it (then the bucket's bucket_done).
  std::vector<std::unique_ptr<CudaProgram>> widen;
  std::vector<DeviceFeeds> widen_feeds;
  std::vector<std::unique_ptr<cuda::Event>> widened_events;
  std::vector<DeviceTensor> apply_fetches;  // the queued apply's fetches, views of its temporaries
  std::unique_ptr<cuda::PinnedBuffer> apply_staging;  // their values, copied down behind the apply
  std::unique_ptr<cuda::Event> applied;  // after the queued apply: the next step's towers wait for it
};

}  // namespace towerjit
