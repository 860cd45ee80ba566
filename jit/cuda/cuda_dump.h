// What TOWERJIT_DUMP (and examples/dump_cuda) writes for the CUDA backend: the module's .cu,
// its .ptx when compiled, the kernel IR (.kir) and the index of jit/dump.h with each kernel's
// launch shape added, and the CUDA routine each library call maps to.
#pragma once

#include <string>

#include "dsl/graph.h"
#include "jit/cuda/cuda_emitter.h"
#include "jit/kir/kernel_ir.h"

namespace towerjit::cuda {

// dump_index_json's index plus, per kernel step, "launch": {"scheme", "block", "grid" (an
// expression of B), "shared_bytes", "vector_width", "params"}, and per library step "cuda":
// the library kernels or cuBLAS calls that run it.
std::string cuda_index_json(const Graph& graph, const kir::Program& program, const CudaModule& module,
                            const std::string& module_name);

// Writes <dir>/<module>.cu, <module>.index.json, <module>.kir and, when `ptx` is non-empty,
// <module>.ptx. Returns the paths written. Throws towerjit::Error when `dir` is not writable.
std::vector<std::string> write_cuda_dump(const std::string& dir, const Graph& graph,
                                         const kir::Program& program, const CudaModule& module,
                                         const std::string& module_name, const std::string& ptx = "");

// The CUDA routines a library call runs as: "cublasSgemmStridedBatched", "tj_im2col +
// cublasSgemmStridedBatched", "tj_max_pool2d", ...
std::string library_routine(const kir::LibraryCall& call);

}  // namespace towerjit::cuda
