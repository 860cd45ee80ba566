// A program's CUDA module compiled as several NVRTC programs at once: NVRTC and ptxas run on one
// thread per program, and a training step of a sequence model is 150-200 kernels (360 KB of
// CUDA C, about 10 s of one core), so compiling it whole keeps a 16-core GPU host waiting on one
// core. The kernels are cut, in order, into runs of about kPartBytes of text; each run, after the
// module's prelude, is a program of its own, compiled and cached on its own (a part unchanged
// since an earlier program hits the cache). The parts compile on up to one thread per core.
//
//   const CompiledCudaModule c = compile_cuda_module(module, "step_42", arch);
//   // c.parts[c.part_of_kernel[i]] holds kernel i (and its combine pass): load each part's
//   // cubin, look each kernel up in its part.
//
// The cut depends on the text alone, never on the machine, so a module's parts (and their cache
// keys) are the same everywhere. With TOWERJIT_DUMP the whole module is written as
// <name>.cu and the parts' PTX, joined in order, as <name>.ptx: the dump reads as one module.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "jit/cuda/cuda_emitter.h"
#include "jit/cuda/nvrtc_compiler.h"

namespace towerjit::cuda {

// Kernel text per part. Chosen from a measurement (docs/cuda.md, "Compile time"): NVRTC's fixed
// cost per program is tens of ms, small beside a part's compile, while 32 KB keeps a 150-kernel
// step in a dozen parts, enough to fill 16 cores only partly but every core of a small machine.
inline constexpr std::size_t kPartBytes = 32 * 1024;

struct CompiledCudaModule {
  std::vector<CudaBinary> parts;  // in module order
  std::vector<int> part_of_kernel;  // per CudaModule::kernels entry: the part that defines it
  bool cache_hit = true;          // every part came from the compile cache
  double compile_ms = 0;          // wall time of the whole compile
  std::string ptx() const;        // the parts' PTX, in order, each headed by a comment
};

// "<module_name>.part<i>": the name part i compiles under (NVRTC's program, the emulator's
// launch records, errors); and back, the module a part's name belongs to (a name that is no
// part's is returned as it is).
std::string part_name(const std::string& module_name, size_t part);
std::string module_of_part(const std::string& name);

// The kernels of `module` cut into parts: for each part, the indices of its kernels.
std::vector<std::vector<int>> cut_into_parts(const CudaModule& module);

// Compiles every part of `module` for `arch` ("sm_90"), through the compile cache, in parallel.
// Part i is named "<module_name>.part<i>" in errors. A compile error throws the first failing
// part's towerjit::Error (compile_cuda's), after every part has finished.
CompiledCudaModule compile_cuda_module(const CudaModule& module, const std::string& module_name,
                                   const std::string& arch);

}  // namespace towerjit::cuda
