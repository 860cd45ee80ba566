// Kernel IR -> CUDA C for NVIDIA GPUs: one `extern "C" __global__` function per loop kernel of
// the program, named after the kernel, headed by a comment listing the DSL ops fused into it
// and where the user wrote them. The text is what NVRTC compiles, what the cache keys on and
// what TOWERJIT_DUMP writes (`.cu`), so it is written to be read.
//
// Every kernel takes the same kind of parameter list, which a runtime can build from
// EmittedKernel alone:
//
//   name(T0* __restrict__ b<id0>, ..., long long batch, const unsigned long long* step_slot
//        [, void* tj_partials, long long chunk, unsigned int* tj_ticket])
//
// one device pointer per entry of `buffers` (const for those it only reads; a view passes the
// base of the buffer it views), then the bound batch size and a device word holding the step
// that keys random numbers (read by the kernel, so a CUDA graph captured once replays with
// each run's step); a reduction kernel also takes the workspace of its partials, the reduced
// points per split (launch() says both) and a ticket: a device word holding 0, given where
// launch().one_pass (the kernel leaves it 0 again), else null. Launch with `block` threads in x
// and launch().grid blocks in x; when launch().combine_grid > 0, launch `combine_symbol` next,
// with the same parameters, on that many blocks. The shared memory is static (already in
// the cubin), reported in `shared_bytes` for occupancy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsl/graph.h"
#include "jit/kir/kernel_ir.h"

namespace towerjit::cuda {

// How a reduction kernel runs at one batch size on one device: the reduced points of each
// output are cut into `splits` consecutive pieces of `chunk` points (the last may be shorter).
// One split: pass 1 stores the results. Several: pass 1 writes one partial per (split, output)
// into a workspace of `partials_bytes`, laid out [split][output], and the combine kernel (pass
// 2) folds each output's partials in split order; or, `one_pass`, the last block of pass 1 to
// finish folds them in the same order. A deterministic function of the shape and the SM count
// (EmittedKernel::launch), so a given device always sums in the same order.
struct Launch {
  int64_t grid = 1;          // pass-1 blocks
  int64_t splits = 1;        // pieces of the reduced points per output
  int64_t chunk = 1;         // reduced points per piece (>= len when splits == 1)
  int64_t combine_grid = 0;  // pass-2 blocks (0: no pass 2)
  int64_t partials_bytes = 0;  // workspace pass 1 writes (0: none)
  bool one_pass = false;     // split, and folded by pass 1's last block (needs the ticket)
};

struct EmittedKernel {
  // How threads map onto the loop space.
  enum class Scheme {
    elementwise,   // grid-stride over the points; `vector_width` points per thread when it can
    row_per_warp,  // reduced axes innermost: one warp per (output, split), shuffle combine
    row_per_block, // reduced axes innermost: one block per (output, split), shuffle + shared-memory
    column,        // a kept axis innermost: 32 outputs per block, 8 slices of the split's reduced
                   // points each, combined in shared memory in slice order (no atomics)
  };
  std::string symbol;
  std::string combine_symbol;   // reductions that may_split(): the pass-2 kernel ("<symbol>_combine")
  std::vector<int> buffers;     // program buffer ids, in parameter order
  std::vector<bool> written;    // per buffer: the kernel stores into it
  Scheme scheme = Scheme::elementwise;
  int block = 256;              // threads per block (x only)
  int shared_bytes = 0;         // static shared memory per block
  kir::Affine points;           // points of the loop space (c + b * B)
  kir::Affine outputs;          // reductions: output elements (rows or columns); else = points
  kir::Affine reduced{1, 0};    // reductions: reduced points per output (len); else 1
  int partial_bytes = 0;        // reductions: bytes of one output's partial (every sibling's)
  // 4: when every pointer the vector path uses is 16-byte aligned (checked in the kernel), a
  // thread takes 4 consecutive points with float4/int4 loads and stores; else 1.
  int vector_width = 1;

  bool is_reduction() const { return scheme != Scheme::elementwise; }
  // A reduction whose launch can split at some batch on some device (it then has a combine
  // kernel): one over a batch-sized loop space, or a fixed one of at least 16384 points.
  bool may_split() const;
  // The launch at `batch` on a device of `sm_count` SMs (split rule: docs/cuda.md, "Reductions").
  Launch launch(int64_t batch, int sm_count) const;
};
struct CudaModule {
  std::string source;                  // the whole .cu text: a header comment, `prelude`, then
                                       // every entry of `kernel_sources` in order
  std::vector<EmittedKernel> kernels;  // one per kir::Program::kernels entry, same order
  std::string prelude;                 // what every kernel needs: random numbers, helpers
  std::vector<std::string> kernel_sources;  // per kernel: its text (partials struct and
                                            // combine pass included), self-contained but for
                                            // `prelude`, so a run of them compiles alone
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
