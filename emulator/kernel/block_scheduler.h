// Runs a kernel's grid with CUDA's execution model on the host: every CUDA thread of a block is
// a fiber; __syncthreads is a real barrier of the block (threads reaching different barriers is
// an error); warp shuffles exchange values between the 32 lanes of a warp by CUDA's rules for
// widths and out-of-range lanes; __shared__ memory belongs to the block and starts poisoned
// (NaN). Blocks are independent and run one after another on the calling thread, in grid order
// or, under a random schedule, in a random one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "emulator/kernel/cuda_host_api.h"

namespace towerjit::emulator {

// A kernel misusing the execution model (a divergent barrier, a shuffle some lane of its mask
// never reaches, a misaligned vector access, too much shared memory): says which kernel, block,
// thread and source line.
class Fault : public std::runtime_error {
 public:
  // `cuda_error`: the CUresult the emulated driver reports for it.
  explicit Fault(const std::string& what, int cuda_error = kLaunchFailed)
      : std::runtime_error(what), cuda_error_(cuda_error) {}
  int cuda_error() const { return cuda_error_; }

  static constexpr int kLaunchFailed = 719;       // CUDA_ERROR_LAUNCH_FAILED
  static constexpr int kIllegalAddress = 700;     // CUDA_ERROR_ILLEGAL_ADDRESS
  static constexpr int kMisalignedAddress = 716;  // CUDA_ERROR_MISALIGNED_ADDRESS

 private:
  int cuda_error_;
};

// A compiled kernel's entry: calls the kernel with its parameters, given as the driver API
// gives them (one pointer to each parameter's bytes).
using KernelEntry = void (*)(void** params);

struct LaunchShape {
  dim3 grid, block;
  std::size_t dynamic_shared_bytes = 0;
  // 0: the blocks run in grid order (x fastest); else in a random order drawn from this seed
  // (TOWERJIT_EMULATOR_SCHEDULE=random).
  std::uint64_t block_order_seed = 0;
};

// The largest static __shared__ total of a block, as on the GPU without opt-in.
inline constexpr std::size_t kStaticSharedLimit = 48 * 1024;

// What a grid did, counted as it ran: the serial work of its threads (TJ_WORK) and the static
// shared memory a block declared.
struct GridStats {
  unsigned long long work_max = 0;  // the busiest thread's count
  double work_sum = 0;              // over every thread of the grid
  unsigned long long threads = 0;
  unsigned long long tail_work_max = 0;  // TJ_TAIL_WORK: the same for the grid's tail
  double tail_work_sum = 0;
  std::size_t static_shared_bytes = 0;
};

// Runs every block of the grid to completion. Throws Fault.
GridStats run_grid(const std::string& kernel, KernelEntry entry, void** params, const LaunchShape& shape);

// The table a compiled module's tj_emu_api points at.
TjEmuApi* emulator_api();

}  // namespace towerjit::emulator
