// What TOWERJIT_DUMP (and examples/dump_cuda) writes for the CUDA backend: the module's .cu,
// its .ptx when compiled, the kernel IR (.kir) and the index of jit/dump.h with each kernel's
// launch shape added, and the CUDA routine each library call maps to.
#pragma once

#include <string>

#include "dsl/graph.h"
#include "dsl/tensor.h"
#include "jit/cuda/cuda_emitter.h"
#include "jit/cuda/dump_graph.h"  // dump_cuda(graph, ...), the public part
#include "jit/kir/kernel_ir.h"

namespace towerjit::cuda {

// The SM count a dump's split tables are worked out for when the device is not known: an
// NVIDIA H200's (and H100 SXM's) 132.
constexpr int kDumpSmCount = 132;

// dump_index_json's index plus, per kernel step, "launch": {"scheme", "block", "grid" (an
// expression of B; "* splits" for a reduction), "shared_bytes", "vector_width", "params", and
// for a reduction "split": {"rule", "combine", "on": {"<sm_count> SMs": {"B=512": {"splits",
// "chunk", "grid", "combine_grid", "partials_bytes"}, ...}, "132 SMs": ...}}}, and per library
// step "cuda": the library kernels or cuBLAS / cuDNN calls that run it (`cudnn`: whether
// convolutions go to cuDNN, as where it loads, or to the fallback: runtime/cuda/cudnn.h).
std::string cuda_index_json(const Graph& graph, const kir::Program& program, const CudaModule& module,
                            const std::string& module_name, bool cudnn = true, int sm_count = kDumpSmCount);

// Writes <dir>/<module>.cu, <module>.index.json, <module>.kir and, when `ptx` is non-empty,
// <module>.ptx. Returns the paths written. Throws towerjit::Error when `dir` is not writable.
std::vector<std::string> write_cuda_dump(const std::string& dir, const Graph& graph,
                                         const kir::Program& program, const CudaModule& module,
                                         const std::string& module_name, const std::string& ptx = "",
                                         bool cudnn = true, int sm_count = kDumpSmCount);

// A program's files for reading its CUDA, emitted from its kernel IR whatever device runs it
// (a CPU program's too): write_cuda_dump's files under `stem`, with the .ptx for `arch`
// (resolve_arch) where NVRTC loads. An NVRTC failure leaves the .ptx out and is reported on
// stderr: a dump never stops a program that runs without CUDA.
std::vector<std::string> dump_cuda_of(const std::string& dir, const Graph& lowered_graph, const kir::Program& program,
                                      const std::string& stem, const std::string& arch = "");

// The CUDA routines a library call runs as: "cublasLtMatmul" (with its epilogue:
// "cublasLtMatmul, CUBLASLT_EPILOGUE_RELU_BIAS"),
// "cudnnConvolutionForward or tj_conv2d_implicit, the faster for the shape" (16-bit:
// "cudnnConvolutionForward"; without cuDNN "tj_conv2d_implicit"),
// "tj_max_pool2d" ("tj_max_pool2d_bf16" where `output` is bf16), ...
std::string library_routine(const kir::LibraryCall& call, bool cudnn = true, DType output = DType::f32);

}  // namespace towerjit::cuda
