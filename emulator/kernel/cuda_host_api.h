// The structs a compiled module and the emulator share: the thread's coordinates and the table
// of the emulator's entry points (cuda_host.h uses them on the module's side,
// block_scheduler.cpp fills them in). Plain C++, no CUDA headers.
#pragma once

#include <cstddef>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
// What the emulator tells a running thread about itself.
struct TjEmuThread {
  dim3 threadIdx, blockIdx, blockDim, gridDim;
};

// The emulator's entry points (emulator/kernel/block_scheduler.cpp fills them in).
struct TjEmuApi {
  const TjEmuThread* (*self)();
  void (*syncthreads)(int line);
  // kind: 0 idx, 1 up, 2 down, 3 xor; `value` holds the lane's bits; returns the source's.
  unsigned long long (*shuffle)(int kind, unsigned mask, unsigned long long value, int lane_arg, int width,
                                int line);
  // The block's next static __shared__ array (each thread's n-th declaration is the block's n-th).
  void* (*shared)(std::size_t bytes, std::size_t align, int line);
  void* (*dynamic_shared)();
  // Reports a misuse by the running thread (a misaligned vector access) and does not return.
  void (*fail)(const char* what, const void* address, int line);
  // Adds n to the running thread's count of serial work (TJ_WORK in a kernel; the launch
  // records of emulator/driver/launch_log.h report it).
  void (*work)(unsigned long long n);
  // The same for the grid's tail: what the last block to finish does after every other block
  // (a reduction's one-pass combine, TJ_TAIL_WORK), counted apart since it runs after the rest.
  void (*tail_work)(unsigned long long n);
};
