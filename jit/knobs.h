// Every environment variable towerjit reads, declared once, typed and documented (as Triton's
// knobs.py). Code elsewhere calls these accessors and never getenv directly, so this file is
// the complete list of what a user can set. jit/knobs.cpp holds the table of them all (name,
// kind of value, its check), including the few the project's own programs read themselves.
//
// Each accessor reads the environment on every call (they are cheap and not on a hot path),
// so tests can setenv a knob and see the effect without restarting the process. The first
// read in a process also checks every TOWERJIT_* variable (check_environment below).
#pragma once

#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

namespace towerjit::knobs {

// ---- The compiler: its cache, dumps and what it tells

// TOWERJIT_CACHE: "off" (also "0", "false", "no") turns the on-disk compile cache off; every
// kernel is then compiled from scratch and nothing is read or written. Default: on.
bool cache_enabled();

// TOWERJIT_CACHE_DIR: puts the compile cache in this directory instead of the default
// (tests point it at a fresh temporary directory). Unset or empty: CompileOptions::cache_dir
// (jit/compile_options.h), which it overrides; both empty: not set.
std::optional<std::string> cache_dir_override();

// XDG_CACHE_HOME: the base directory for user caches (XDG spec); the cache lives in
// $XDG_CACHE_HOME/towerjit. Unset or empty: not set.
std::optional<std::string> xdg_cache_home();

// HOME: used for the fallback cache location ~/.cache/towerjit. Unset or empty: not set.
std::optional<std::string> home();

// The compile cache directory, resolved in order: TOWERJIT_CACHE_DIR, then
// $XDG_CACHE_HOME/towerjit, then $HOME/.cache/towerjit, then <system temp dir>/towerjit-cache
// (a process with no HOME still gets a working cache). Not created here.
std::string cache_dir();

// TOWERJIT_DUMP: a directory; when set, each compiled kernel's source (.ll, .cu), PTX and an
// index are written there for reading. Unset or empty: CompileOptions::dump_dir, which it
// overrides; both empty: no dumps.
std::optional<std::string> dump_dir();

// TOWERJIT_DEBUG: how much the compiler tells on stderr. 1: one line per compiled program
// (kernels, library calls, compile time); 2: also the graph after each pass that changed it;
// 3: also the kernel IR. Default 0: nothing.
int debug_level();

// TOWERJIT_GROUP_KERNELS: "off" (also "0", "false", "no") keeps every elementwise kernel its
// own launch instead of grouping independent ones (the optimiser's apply over all variables)
// into one kernel; for measuring what grouping buys. Default: on.
bool group_kernels_enabled();

// TOWERJIT_MATMUL_EPILOGUES: "off" (also "0", "false", "no") keeps a matrix product's bias add
// and ReLU in a loop kernel after it instead of the product's epilogue
// (jit/passes/epilogues.h); for measuring what the epilogue buys. Default: on.
bool matmul_epilogues_enabled();

// TOWERJIT_FACTOR_SUMS: "off" (also "0", "false", "no") leaves sums of products as written
// instead of taking the factors that do not vary along the summed axes out of them
// (jit/passes/factor_sums.h); for measuring what that buys. Default: on.
bool factor_sums_enabled();

// TOWERJIT_RECOMPUTE_IN_READERS: "off" (also "0", "false", "no") has every kernel load a stored
// value instead of computing it again from a buffer it loads anyway
// (FusionPlan::recompute_source in jit/passes/fusion_plan.h); for measuring what that buys.
// Default: on.
bool recompute_in_readers_enabled();

// TOWERJIT_REDUCTION_FINISHERS: "off" (also "0", "false", "no") launches the elementwise kernel
// after a GPU reduction over its output points on its own instead of running it in the
// reduction (jit/passes/reduction_finishers.h); for measuring what that buys. Default: on.
bool reduction_finishers_enabled();

// TOWERJIT_FUSED_MAX_POOLS: "off" (also "0", "false", "no") keeps a max pool and its gradient
// as library routines instead of computing the pool in the step that makes its input: a GPU
// kernel (jit/passes/fused_max_pools.h), a CPU convolution (jit/passes/conv_pools.h); for
// measuring what that buys. Default: on.
bool fused_max_pools_enabled();

// TOWERJIT_CONV_EPILOGUES: "off" (also "0", "false", "no") keeps a convolution's bias add and
// ReLU in a loop kernel after it instead of the convolution's epilogue
// (jit/passes/epilogues.h); for measuring what the epilogue buys. Default: on.
bool conv_epilogues_enabled();


// ---- The CPU code

// TOWERJIT_CPU_ISA: the widest x86 vector level towerjit's CPU code may use: "amx" (AMX-BF16
// tiles for bf16 matrix products, with all of avx512bf16), "avx512bf16"
// (AVX-512 with AVX512_BF16's vdpbf16ps for bf16 matrix products), "avx512" (AVX-512 F and BW),
// "avx2" (AVX2 + FMA, x86-64-v3), "baseline" (SSE2, x86-64). It caps the LLVM target of the
// JIT'd kernels, the direct convolutions, the 2x2 pools, the bf16 products and the OpenBLAS core
// type (jit/cpu/cpu_isa.h). Unset: the widest this CPU has. Another value is an error; a level
// the CPU lacks is an error when towerjit first needs the level (cpujit::cpu_isa()).
enum class CpuIsa { baseline, avx2, avx512, avx512bf16, amx };
std::optional<CpuIsa> cpu_isa_cap();

// TOWERJIT_DIRECT_CONV: "off" (also "0", "false", "no") runs every CPU convolution through
// im2col + sgemm instead of the direct kernels (runtime/cpu/direct_conv.h), which are those of
// the widest vector unit TOWERJIT_CPU_ISA allows. For measuring and testing each. Default: on.
// Any other value than an on or off word is an error.
bool direct_conv();

// TOWERJIT_CHECK_NUMERICS: "on" makes every program, CPU or GPU, check each step's output for NaN and
// infinities and stop at the first, naming the op (runtime/numerics_check.h), like
// tf.debugging.check_numerics. Unset: CompileOptions::check_numerics (off unless a program
// sets it), which it overrides. A value neither on nor off is an error.
bool check_numerics();


// ---- Towers and their strategy (the environment overrides TowerStrategyOptions where both exist)

// TOWERJIT_PIN_TOWERS: "off" (also "0", "false", "no") leaves CPU towers' threads free to run
// on any core; by default each CPU tower's threads are pinned to a group of cores of its own
// (runtime/cpu_affinity.h). Default: on.
bool pin_towers();

// TOWERJIT_GPU_VARIABLES: "on" (also "1", "true", "yes") keeps the variables of sync towers that
// are all GPUs on the GPUs, reduces and applies there (runtime/towers/gpu_resident_sync.h), and
// places each variable of async GPU towers on a GPU (runtime/towers/placed_variables.cpp);
// "off" keeps them in host memory. Default for sync towers: off — the CPU reduces and applies —
// until the path has been measured on GPUs; for async towers, the seed's placement.
bool gpu_variables();
// The same as an override of a program's option: the knob's value when set, else `option`.
bool gpu_variables(bool option);

// TOWERJIT_PREFETCH_FEEDS: "on" has fit() on sync towers that are all GPUs, with the variables
// on the GPUs, copy each batch to the GPUs while the step before it trains
// (runtime/towers/feed_prefetch.h) and, in one process, queue each step behind the one before
// (GpuResidentSync::queue); "off" copies each batch at its own step and waits for each step
// before the next. Default: on.
bool prefetch_feeds(bool option);  // the knob when set, else `option` (TowerStrategyOptions)

// TOWERJIT_BUCKET_MB: the size of the gradient buckets reduced between GPUs while the backward
// pass goes on (variables on the GPUs); the first bucket is 1 MB or this, the smaller, as in
// PyTorch DDP. 0 puts every gradient in a bucket of its own. Default: 25.
double bucket_mb();
double bucket_mb(double option);  // the knob when set, else `option` (TowerStrategyOptions)

// TOWERJIT_DETERMINISTIC: "layout" makes sync training give bitwise the same result whatever
// the split of the towers into processes (1x4, 2x2, 4x1): every tower's gradients are gathered
// and summed in global tower order, at P/2 times a ring all-reduce's traffic (docs/
// distributed.md). "off" or unset: each process sums its towers, then the processes
// all-reduce (bitwise reproducible for a fixed layout only). Another value is an error.
bool deterministic_layout();
bool deterministic_layout(bool option);  // the knob when set, else `option` (TowerStrategyOptions)


// ---- Processes (MPI)

// TOWERJIT_MPI: "off" (also "0", "false", "no") makes a process launched by mpirun or srun
// run alone, as if started by hand, ignoring the launcher's environment. Default: on — a
// process whose environment says a launcher started it joins that launch's world over MPI
// (runtime/dist/world.h).
bool mpi_enabled();

// TOWERJIT_MPI_LIBRARY: the MPI transport plugin (libtowerjit_mpi.so). Default: the one beside
// libtowerjit_jit.so (the build's lib/ folder, or an install's), else the loader's search path.
std::string mpi_library();

// TOWERJIT_MPI_START_TIMEOUT: seconds a launched process waits for MPI's start-up and a first
// barrier over every rank before it stops with an error (a rank that never starts or cannot
// reach the others). Default: 30.
double mpi_start_timeout_s();

// TOWERJIT_MPI_STALL_WARNING and TOWERJIT_MPI_STALL_TIMEOUT (Horovod's stall check): seconds a
// rank waits in one MPI call for the others before it warns (again every as many seconds;
// default 60), and before it stops with an error, which ends every rank (default 0: never). A
// rank that is stopped, deadlocked or far slower than the others shows as such a wait.
double mpi_stall_warning_s();
double mpi_stall_timeout_s();


// ---- GPUs: CUDA, its libraries and NCCL

// TOWERJIT_CUDA: "emulator" loads the emulated GPU (emulator/: towerjit's CUDA C run on the
// CPU with CUDA's execution model) in place of the NVIDIA driver, NVRTC's module loading,
// cuBLAS and NCCL; "driver" or unset: NVIDIA's. Another value is an error.
bool cuda_emulated();

// TOWERJIT_CUDA_ARCH: the GPU architecture NVRTC compiles for ("sm_80", "80"), overriding the
// device's own; a --arch flag overrides this. Unset: the device's, or sm_90 with no device.
std::optional<std::string> cuda_arch();

// CUDA_HOME: a CUDA installation to look for NVRTC in ($CUDA_HOME/lib64) when the loader's
// path does not have it; /usr/local/cuda is tried last. Unset or empty: not set.
std::optional<std::string> cuda_home();

// TOWERJIT_CUDA_CACHING: "off" (also "0", "false", "no") makes the CUDA allocator ask the driver
// for exactly the bytes each buffer needs and give them back when it is freed, instead of
// keeping blocks of rounded sizes for reuse (as PYTORCH_NO_CUDA_MEMORY_CACHING=1), so a write
// past a buffer reaches the end of its allocation, where the emulated GPU's guard zones see it.
// Slower; for debugging. Default: on.
bool cuda_caching();

// TOWERJIT_CUDA_GRAPHS: "off" (also "0", "false", "no") queues every GPU program's run call by
// call instead of capturing it once per batch size as a CUDA graph and replaying it
// (runtime/cuda/program_graphs.h). Default on.
bool cuda_graphs();

// TOWERJIT_ONE_PASS_REDUCTIONS: "off" (also "0", "false", "no") folds every split GPU reduction's
// partials in a combine kernel of its own, as before, instead of in the reduction's last block
// where it has few outputs (jit/cuda/launch_shape.cpp); the sums are the same bits either way.
// Default: on.
bool one_pass_reductions();

// TOWERJIT_ALLOW_TF32: "on" (also "1", "true", "yes") lets the GPU's matrix products round
// their inputs to TF32 (a 10-bit mantissa) and run on the tensor cores, accumulating in f32:
// cuBLASLt's CUBLAS_COMPUTE_32F_FAST_TF32, the twin of PyTorch's
// torch.backends.cuda.matmul.allow_tf32. About 1e-3 relative error per product instead of
// 6e-8, for up to 7x the FP32 throughput (H200: 495 against 67 TFLOP/s). Read when a GPU
// program is made. Default: off (full FP32). The CPU ignores it.
bool allow_tf32();

// TOWERJIT_NCCL: "off" (also "0", "false", "no") sums the GPUs' gradients with copies to the
// first GPU instead of NCCL's all-reduce (variables on the GPUs, several GPUs). Default: on
// where NCCL loads.
bool nccl_enabled();

// TOWERJIT_NCCL_WORLD: "on" (also "1", "true", "yes") makes sync GPU towers with the variables on
// the GPUs, over several processes, reduce through one NCCL communicator over every process's
// GPUs (rank 0's ncclGetUniqueId broadcast over MPI, ncclCommInitRank), where every process's
// NCCL can. Default: off — NCCL (or copies) inside each process, then MPI between them — until
// measured on several GPUs.
bool nccl_world();

// TOWERJIT_CUDNN: "off" runs GPU convolutions on towerjit's own implicit-GEMM kernels instead
// of cuDNN (a warning says so once); "on" or unset: cuDNN where it loads.
bool cudnn_enabled();

// TOWERJIT_CONV_IMPLICIT_GEMM: "on" or unset: where cuDNN is used, towerjit's implicit GEMM is
// timed beside cuDNN's algorithms for each f32 convolution pass and shape, and kept where it
// ran faster (runtime/cuda/conv_choice.h); "off": cuDNN's algorithms alone.
bool conv_implicit_gemm();

// TOWERJIT_CUDNN_WORKSPACE_MB: the most device memory, in MiB, a cuDNN algorithm's workspace
// may take (as TensorFlow's TF_CUDNN_WORKSPACE_LIMIT_IN_MB); algorithms needing more are
// passed over for one that fits. Unset: the device's free memory.
std::optional<int64_t> cudnn_workspace_mb();

// VIRTUAL_ENV, then CONDA_PREFIX: a Python environment whose nvidia/cudnn/lib (pip's cuDNN
// wheel, which PyTorch installs) is searched for libcudnn.so.9. Unset or empty: none.
std::optional<std::string> python_env_prefix();


// ---- The emulated GPU (TOWERJIT_CUDA=emulator, emulator/)

// TOWERJIT_EMULATED_GPUS: how many emulated GPUs there are (read once, when the emulator loads).
// Default: 1.
int emulated_gpus();

// TOWERJIT_EMULATED_GPU_MB: each emulated GPU's memory, in MiB (read once). Default: 4096.
int emulated_gpu_mb();

// TOWERJIT_EMULATED_CUDNN_MS: the milliseconds the emulated cuDNN's find reports for a nominal
// 1 of its table of algorithms (emulator/driver/cudnn.cpp). Default 0.001: below what any
// kernel takes on the emulator, whose kernels run on the host, so towerjit's implicit GEMM,
// timed by events there, never wins the choice unless a test raises it.
double emulated_cudnn_ms();

// TOWERJIT_EMULATED_GPU_SMS: how many SMs each emulated GPU reports (cuDeviceGetAttribute), so
// launch shapes that the runtime caps by the SM count (32 blocks an SM) are those the modelled
// GPU would get; `towerjit_bench --gpu-model` sets its GPU's count. Default: 4.
int emulated_gpu_sms();

// TOWERJIT_EMULATOR_SCHEDULE: "random:SEED" makes each emulated stream wait a random 0-2 ms
// (drawn from SEED and the stream's number) before each piece of its work, so independent
// streams run in other orders and a missing event wait shows; "fifo" or unset: no delays.
// Read when a stream is created.
std::optional<unsigned long long> emulator_random_schedule();

// TOWERJIT_EMULATOR_LIBRARY: the emulator's library (libtowerjit_cuda_emulator.so). Default:
// the one beside libtowerjit_jit.so (the build's lib/ folder, or an install's), else the
// loader's search path.
std::string emulator_library();

// TOWERJIT_EMULATED_NCCL_TIMEOUT: seconds an emulated NCCL rank waits for the other processes'
// ranks in an all-reduce before it aborts (emulator/driver/nccl.cpp reads it). Default: 120.
double emulated_nccl_timeout_s();

// ---- The check of the environment

// Checks every variable in the environment whose name starts TOWERJIT_ (in any case) against
// the table in jit/knobs.cpp, whether or not this run reads it: a name that is no knob is a
// warning on stderr naming the closest knob, once per process; a value its knob cannot read
// throws towerjit::Error naming the variable, its value and what to set. Every accessor calls
// it first, so the first knob read of a process checks (thread-safe); after a pass it does
// nothing more, after an error the next read checks again. A program may call it at its
// start to see the errors there.
void check_environment();

// The lock around the process's environment. glibc's setenv may free the array of variables a
// concurrent getenv is walking (a crash in getenv, seen once in a test run), so knob reads,
// which pool threads make per matrix product, hold it shared, and towerjit's own setenv calls
// (runtime/cpu/blas.cpp, just before OpenBLAS loads) hold it exclusively.
std::shared_mutex& environment_mutex();

namespace detail {

// What check_environment finds in `entries` ("NAME=value", as in environ), every time it is
// called: the warning lines for unknown names, and the first bad value's error message.
struct EnvironmentCheck {
  std::vector<std::string> warnings;
  std::optional<std::string> error;
};
EnvironmentCheck check_variables(const std::vector<std::string>& entries);

// The knob nearest to `name` by edit distance (case aside), when near enough to be what was
// meant; nullopt when every knob is far from it.
std::optional<std::string> closest_knob(const std::string& name);

// Every name the table declares, in its order.
std::vector<std::string> declared_names();

}  // namespace detail
}  // namespace towerjit::knobs
