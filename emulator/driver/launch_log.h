// The emulated GPU's launch records: while recording is on, every piece of work a stream runs
// (a kernel, a library call, a copy) adds one record, in the order its stream runs it. The cost
// model (jit/cost/) turns the records into a predicted time on a named GPU; a record carries
// what the model needs and the emulator can know: the launch shape, the serial work its
// threads did (counted as they ran), and the bytes and FLOPs where the caller knows them.
//
// Any stand-in records its calls with one line, on the stream thread, when the work runs:
//
//   record_launch({.name = "cublasSgemm", .kind = LaunchKind::library, .stream = &stream,
//                  .flops = 2.0 * m * n * k, .bytes = 4.0 * (m * k + k * n + 2 * m * n),
//                  .gemm = {m, n, k, batch}});
//
// A process reads the records through the library's C entry points (tj_emu_launch_log_start,
// tj_emu_launch_log_stop: JSON lines), found with dlsym on the emulator's library.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace towerjit::emulator {

enum class LaunchKind {
  kernel,   // a CUDA C kernel run by the block scheduler
  library,  // a library routine a stand-in computes on the host (cuBLAS, cuDNN, ...)
  copy,     // a memory copy or fill
};

struct LaunchRecord {
  std::string name;              // the kernel's symbol, or the library routine ("cublasSgemmStridedBatched")
  std::string module;            // kernels: the module (the NVRTC program's name); else empty
  LaunchKind kind = LaunchKind::kernel;
  const void* stream = nullptr;  // the stream it ran on (an identity, not dereferenced)
  int device = 0;
  std::array<unsigned, 3> grid{0, 0, 0}, block{0, 0, 0};  // kernels; zeros where a library hides its launches
  std::uint64_t static_shared_bytes = 0, dynamic_shared_bytes = 0;
  // Work counted while the threads ran: TJ_WORK(n) in a kernel adds n to its thread's count
  // (a loop kernel counts one per point it computes). The busiest thread's count and the mean
  // over every thread of the grid.
  std::uint64_t work_max = 0;
  double work_mean = 0;
  // The same for the work of the grid's tail (TJ_TAIL_WORK: what the last block to finish does
  // after all the others, a reduction's one-pass combine): its busiest thread, and the sum over
  // every thread of the grid.
  std::uint64_t tail_work_max = 0;
  double tail_work_sum = 0;
  // Bytes read and written and floating-point operations, where the recorder knows them
  // (library calls, copies); 0 for loop kernels, whose costs the program's index holds.
  double bytes = 0, flops = 0;
  // Library matrix products: m, n, k and the batch count (0 otherwise).
  std::array<std::int64_t, 4> gemm{0, 0, 0, 0};
  // Library matrix products of bf16 or f16 operands (tensor cores at the BF16 / FP16 peak).
  bool half_operands = false;
  // Copies: whether the copy crosses the host link (host to device or back).
  bool host_link = false;
  // Whether it ran as a node of a CUDA graph's replay (cuGraphLaunch) rather than from its own
  // launch call: the model charges it a graph node's overhead, not a launch's. Set by
  // record_launch inside a GraphReplayScope.
  bool graph = false;
};

// Marks the work the calling thread runs while it lives as part of a graph's replay.
class GraphReplayScope {
 public:
  GraphReplayScope();
  ~GraphReplayScope();
  GraphReplayScope(const GraphReplayScope&) = delete;
  GraphReplayScope& operator=(const GraphReplayScope&) = delete;
};

// Whether records are being taken (cheap: one atomic load).
bool launch_log_enabled();

// Adds `r` when recording is on (else nothing). Thread-safe; call it where the work runs (the
// stream's thread), so the records follow each stream's order.
void record_launch(const LaunchRecord& r);

// The kind's name in the JSON lines: "kernel", "library", "copy".
const char* launch_kind_name(LaunchKind k);

}  // namespace towerjit::emulator
