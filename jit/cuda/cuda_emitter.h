// Kernel IR -> CUDA C for NVIDIA GPUs: one `extern "C" __global__` function per loop kernel of
// the program, named after the kernel, headed by a comment listing the DSL ops fused into it
// and where the user wrote them. The text is what NVRTC compiles, what the cache keys on and
// what TOWERJIT_DUMP writes (`.cu`), so it is written to be read.
//
// Every kernel takes the same kind of parameter list, which a runtime can build from
// EmittedKernel alone:
//
//   name(T0* __restrict__ b<id0>, ..., long long batch, const unsigned long long* step_slot)
//
// one device pointer per entry of `buffers` (const for those it only reads; a view passes the
// base of the buffer it views), then the bound batch size and a device word holding the step
// that keys random numbers (read by the kernel, so a CUDA graph captured once replays with
// each run's step). Launch with `block` threads in x and grid_size(...) blocks in x; the shared
// memory is static (already in the cubin), reported in `shared_bytes` for occupancy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsl/graph.h"
#include "jit/kir/kernel_ir.h"

namespace towerjit::cuda {

struct EmittedKernel {
  // How threads map onto the loop space.
  enum class Scheme {
    elementwise,   // grid-stride over the points; `vector_width` points per thread when it can
    row_per_warp,  // trailing reduction: one warp per output, warp-shuffle combine
    row_per_block, // trailing reduction: one block per output, shuffle + shared-memory combine
    column,        // non-trailing reduction: 32 outputs per block, 8 slices of the reduced
                   // points each, combined in shared memory in slice order (no atomics)
  };
  std::string symbol;
  std::vector<int> buffers;     // program buffer ids, in parameter order
  std::vector<bool> written;    // per buffer: the kernel stores into it
  Scheme scheme = Scheme::elementwise;
  int block = 256;              // threads per block (x only)
  int shared_bytes = 0;         // static shared memory per block
  kir::Affine points;           // points of the loop space (c + b * B)
  kir::Affine outputs;          // reductions: output elements (rows or columns); else = points
  // 4: when every pointer the vector path uses is 16-byte aligned (checked in the kernel), a
  // thread takes 4 consecutive points with float4/int4 loads and stores; else 1.
  int vector_width = 1;

  // Blocks to launch for `batch`: enough for every thread to have work (at most one
  // grid-stride turn), capped at `max_blocks` (e.g. 32 per SM), at least 1.
  int64_t grid_size(int64_t batch, int64_t max_blocks = 1 << 20) const;
};

struct CudaModule {
  std::string source;                  // the whole .cu text
  std::vector<EmittedKernel> kernels;  // one per kir::Program::kernels entry, same order
};

// Emits every loop kernel of `program`. `graph` is the graph the program's node ids refer to
// (LoweredProgram::graph): it supplies the op names and file:line of each kernel's header.
CudaModule emit_cuda_module(const Graph& graph, const kir::Program& program,
                            const std::string& module_name);

// The library kernels (pools and their gradients, one_hot, argmax, pad, concat parts,
// im2col / col2im), one fixed module; see jit/cuda/device/library_kernels.cu.
std::string library_module_source();

// The names of the kernels library_module_source() defines.
const std::vector<std::string>& library_kernel_names();

}  // namespace towerjit::cuda
