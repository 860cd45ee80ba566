// A graph compiled for a GPU, as CpuProgram (runtime/cpu/cpu_program.h) is for the CPU: lowered
// to the kernel IR once, its loop kernels emitted as CUDA C (jit/cuda/cuda_emitter.h) and
// compiled by NVRTC for the device's architecture once, then run any number of times. The
// batch stays symbolic, so every batch size runs the same kernels.
//
// A run queues every step on the program's own stream, in the program's order: loop kernels,
// library calls (cuBLAS, the library kernels) and copies; then it copies the fetches back and
// waits. Several programs (towers) may share one GPU, each on its stream. The run is captured
// once per batch size as a CUDA graph and replayed at every later run (program_graphs.h,
// TOWERJIT_CUDA_GRAPHS).
//
//   CudaProgram step(graph, {loss}, /*run_update_ops=*/true);       // gpu:0
//   DeviceVariables vars = to_device(initial, step.device(), step.stream());
//   for (...) loss = step.run(feeds, vars, k)[0];                    // weights stay on the GPU
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "dsl/devices.h"
#include "dsl/tensor.h"
#include "jit/cuda/cuda_emitter.h"
#include "jit/cuda/module_parts.h"
#include "jit/cuda/nvrtc_compiler.h"
#include "jit/kir/kernel_ir.h"
#include "jit/passes/buffer_plan.h"
#include "runtime/cuda/cublas.h"
#include "runtime/cuda/cudnn.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/cuda/module.h"
#include "runtime/cuda/program_graphs.h"

namespace towerjit {

class CudaProgram {
 public:
  // Compiles what `fetches` (and, with `run_update_ops`, the graph's update ops) need for
  // `device` (a gpu(i)). Throws towerjit::Error naming `loc` when there is no such device
  // ("no CUDA device: ..."), before any compiling. `name` names the module and its files under
  // TOWERJIT_DUMP (jit/dump.h's dump_stem), as CpuProgram's.
  CudaProgram(const Graph& graph, std::vector<Tensor> fetches, bool run_update_ops = false,
              Device device = gpu(0), const std::string& name = "program", Loc loc = Loc::current());
  // The same with an explicit list of update ops (Assign tensors) to run.
  CudaProgram(const Graph& graph, const std::vector<Tensor>& fetches, const std::vector<Tensor>& update_ops,
              Device device = gpu(0), const std::string& name = "program", Loc loc = Loc::current());
  ~CudaProgram();
  CudaProgram(const CudaProgram&) = delete;
  CudaProgram& operator=(const CudaProgram&) = delete;

  // Runs one step, as CpuProgram::run: inputs are checked by name, shape and dtype; variables
  // are read, and written by the update ops. With HostVariables the variables are copied to
  // the device and the written ones back; with DeviceVariables they stay on the device (and
  // must live on this program's device). `step` keys random numbers (dropout masks). Returns
  // the fetches, on the host.
  std::vector<HostTensor> run(const HostFeeds& feeds, HostVariables& variables, uint64_t step = 0,
                              Loc loc = Loc::current());
  std::vector<HostTensor> run(const HostFeeds& feeds, DeviceVariables& variables, uint64_t step = 0,
                              Loc loc = Loc::current());
  std::vector<HostTensor> run(const DeviceFeeds& feeds, DeviceVariables& variables, uint64_t step = 0,
                              Loc loc = Loc::current());
  // The same, with the fetches left on this program's device, each in a tensor of its own (the
  // tower runtime reduces gradients there without a trip through the host).
  std::vector<DeviceTensor> run_to_device(const HostFeeds& feeds, DeviceVariables& variables, uint64_t step = 0,
                                          Loc loc = Loc::current());
  std::vector<DeviceTensor> run_to_device(const DeviceFeeds& feeds, DeviceVariables& variables, uint64_t step = 0,
                                          Loc loc = Loc::current());
  // The same without waiting: the run waits on the device for `wait` (events recorded on other
  // streams or devices) and queues each fetch's copy right after the step that finishes it,
  // recording ready[j] (where given and not null) after fetch j's copy, so other streams can
  // start on a fetch while the later steps run. finish() waits for the run and raises what it
  // raised; the feeds and variables must stay untouched until then, and the next run must not
  // be queued before it.
  std::vector<DeviceTensor> queue_to_device(const HostFeeds& feeds, DeviceVariables& variables, uint64_t step,
                                            const std::vector<const cuda::Event*>& wait,
                                            const std::vector<cuda::Event*>& ready, Loc loc = Loc::current());
  std::vector<DeviceTensor> queue_to_device(const DeviceFeeds& feeds, DeviceVariables& variables, uint64_t step,
                                            const std::vector<const cuda::Event*>& wait,
                                            const std::vector<cuda::Event*>& ready, Loc loc = Loc::current());
  void finish(Loc loc = Loc::current()) { finish_run(loc); }
  // The index of the step after which fetch j holds its value (-1: no step writes it): the
  // order the fetches finish in.
  int fetch_ready_after(size_t j) const { return fetch_done_after_.at(j); }

  const kir::Program& program() const { return program_; }
  const Graph& lowered_graph() const { return graph_; }  // the optimised copy program() refers to
  const std::string& name() const { return name_; }
  const cuda::CudaModule& module() const { return module_; }  // the .cu text and launch shapes
  const cuda::CompiledCudaModule& compiled() const { return compiled_; }  // parts, PTX, compile time
  cuda::DeviceContext& device() const { return *device_; }
  const cuda::Stream& stream() const { return *stream_; }
  // Bytes of temporaries one run needs at this batch size (after buffer reuse).
  int64_t peak_bytes(int64_t batch) const;
  // The program's variables that some step writes (update ops), by buffer name.
  const std::vector<std::string>& written_variables() const { return written_names_; }

  // Profiling hook (bench/): when set, run() adds each step's GPU time in milliseconds
  // (between events around it) to (*step_times)[i], i indexing program().steps. Off by default.
  // Runs so timed are not captured as graphs.
  std::vector<double>* step_times = nullptr;

  // How runs were queued: graphs captured (once per batch size, and again when an address
  // they baked in moved), runs replayed from a graph, runs queued call by call (graphs off,
  // TOWERJIT_CHECK_NUMERICS, step_times).
  struct GraphCounts {
    int64_t captures = 0, replays = 0, uncaptured = 0;
  };
  const GraphCounts& graph_counts() const { return graph_counts_; }
  // The same, summed over every program of the process so far (thread-safe).
  static GraphCounts total_graph_counts();
  // With `in_place`, run_to_device and queue_to_device return each fetch that lives in the
  // program's temporaries as a view of its buffer rather than a copy: no copy per fetch, and
  // the same address at every run (so a program fed with it replays its graph). A view holds
  // its value until this program's next run is queued; the caller must be done with it by
  // then (the tower trainer is: each step's reductions finish before the next step starts).
  void set_fetches_in_place(bool in_place) { fetches_in_place_ = in_place; }
  // Test hook: called while a run is being captured, on the capturing thread.
  std::function<void()> during_capture;

 private:
  CudaProgram(const Graph& graph, const std::vector<int>& fetches, const std::vector<int>& update_ops,
              Device device, const std::string& name, Loc loc);
  struct Transfer {  // a copy between host memory and the device, staged through staging_
    void* host;
    CUdeviceptr device;
    size_t bytes;
  };
  template <typename Feeds>
  int64_t bind_batch(const Feeds& feeds, Loc loc) const;
  std::vector<CUdeviceptr> bind_buffers(const DeviceFeeds& feeds, DeviceVariables& variables, int64_t batch);
  template <typename Feeds>
  std::vector<DeviceTensor> run_fetching_to_device(const Feeds& feeds, DeviceVariables& variables, uint64_t step,
                                                   Loc loc);
  // queue_run() then finish_run(): the fetches on the host.
  std::vector<HostTensor> execute(const DeviceFeeds& feeds, DeviceVariables& variables, int64_t batch,
                                  uint64_t step, const std::vector<Transfer>& uploads,
                                  const std::vector<Transfer>& downloads, Loc loc);
  // Queues `uploads`, every step, the fetches' copies (into host_fetches through staging, or
  // into device_fetches right after the step finishing each, see queue_to_device) and
  // `downloads`' copies back; returns without waiting. finish_run() waits and delivers.
  void queue_run(const DeviceFeeds& feeds, DeviceVariables& variables, int64_t batch, uint64_t step,
                 const std::vector<Transfer>& uploads, const std::vector<Transfer>& downloads,
                 std::vector<HostTensor>* host_fetches, std::vector<DeviceTensor>* device_fetches,
                 const std::vector<const cuda::Event*>& wait, const std::vector<cuda::Event*>& ready, Loc loc);
  void finish_run(Loc loc);
  void prepare(int64_t batch);
  // Queues steps first..last (program().steps indices).
  void queue_steps(const std::vector<CUdeviceptr>& base, int64_t batch, int first, int last, Loc loc);
  void run_kernel(int index, const std::vector<CUdeviceptr>& base, int64_t batch);
  void run_call(int index, const std::vector<CUdeviceptr>& base, int64_t batch);
  std::vector<Transfer> stage_feeds(const HostFeeds& feeds);
  // TOWERJIT_CHECK_NUMERICS: waits for step `index`, copies the buffers back and checks them
  // as the CPU does (runtime/numerics_check.h).
  void check_numerics_after(int index, const std::vector<CUdeviceptr>& base, int64_t batch, const DeviceFeeds& feeds,
                            const DeviceVariables& variables, uint64_t step, Loc loc);

  Graph graph_;  // optimised copy; the program's node ids refer to it
  kir::Program program_;
  cuda::DeviceContext* device_ = nullptr;
  std::unique_ptr<cuda::Stream> stream_;
  std::unique_ptr<cuda::Cublas> blas_;
  std::unique_ptr<cuda::Cudnn> dnn_;  // null: no convolutions, or cuDNN unavailable (the fallback)
  cuda::CudaModule module_;
  cuda::CompiledCudaModule compiled_;
  std::vector<std::unique_ptr<cuda::LoadedModule>> loaded_;  // per part of compiled_
  std::vector<CUfunction> functions_;
  std::vector<CUfunction> combine_functions_;  // per kernel: a split reduction's pass 2 (else null)
  std::vector<std::string> kernel_what_;   // per kernel: its name and DSL ops, for errors
  std::vector<int> written_;               // variable buffers some step writes
  std::vector<std::string> written_names_;
  std::vector<int> fetch_done_after_;      // per fetch: the step that finishes it (-1: none writes it)
  std::vector<int> one_hot_calls_;         // calls that need an error slot, in slot order
  std::string name_;                       // the module's name, its dump stem: "tower_step"
  bool check_numerics_ = false;            // TOWERJIT_CHECK_NUMERICS

  // Per-run state, kept between runs so a steady training loop allocates nothing.
  BufferPlan plan_;               // the temporaries' layout for planned_batch_
  size_t scratch_bytes_ = 0;      // the largest scratch (library call or partials) at planned_batch_
  int64_t planned_batch_ = -1;
  cuda::DeviceBuffer arena_;      // temporaries
  cuda::DeviceBuffer scratch_;    // library calls' scratch (cuDNN's workspace, partial sums), split
                                  // reductions' partials
  cuda::DeviceBuffer error_slots_;  // one 8-byte slot per one-hot call
  std::unique_ptr<cuda::PinnedBuffer> staging_;  // feeds up, fetches down
  std::vector<std::unique_ptr<cuda::Event>> timing_;  // step_times: one before each step, one after the last
  DeviceFeeds host_feeds_;        // device copies of host feeds: views into feed_block_
  cuda::DeviceBuffer feed_block_;  // stage_feeds' layout of them, one room a feed
  std::map<std::string, size_t> feed_room_;  // per feed: the bytes of its largest batch so far
  DeviceVariables host_variables_;  // device copies of host variables
  // The run queued and not yet finished: what comes back through staging, and where.
  bool queued_ = false;
  std::vector<Transfer> back_;
  std::vector<size_t> back_offsets_;
  std::vector<uint64_t> slots_;    // one-hot error slots

  // CUDA graphs (program_graphs.h): the run's pieces (split where a fetch is copied out or
  // signalled to another stream), by what they baked in: the batch, buffer addresses,
  // staging, transfers, cuts.
  static constexpr size_t kGraphsKept = 8;
  // A program whose runs needed a new capture this many times in a row (its caller's feeds
  // are new tensors at every run, say) stops capturing: a capture costs more than it saves
  // when it is replayed only once. Training needs at most two in a row (the last, smaller
  // batch of an epoch, then the full batch where the addresses are still the first epoch's).
  static constexpr int kMissesToGiveUp = 4;
  int misses_in_a_row_ = 0;
  bool graphs_enabled_ = false;  // TOWERJIT_CUDA_GRAPHS and a driver with graphs
  std::map<std::vector<uint64_t>, std::vector<std::unique_ptr<cuda::GraphExec>>> graphs_;
  GraphCounts graph_counts_;
  cuda::DeviceBuffer step_slot_;  // the run's step, read by every kernel
  cuda::DeviceBuffer ticket_;     // one-pass reductions: picks the block that folds the partials
  bool draws_random_ = false;     // a kernel draws random numbers, keyed by the step
  uint64_t step_high_ = ~uint64_t{0};  // the step's high half in step_slot_ (~0: not written yet)
  bool fetches_in_place_ = false;
};

}  // namespace towerjit
