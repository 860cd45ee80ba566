// CUDA C -> PTX and cubin through NVRTC, with the on-disk compile cache.
//
//   auto bin = cuda::compile_cuda(module.source, "step_42", cuda::resolve_arch());
//   // bin.cubin: load with cuModuleLoadData; bin.ptx: for reading, or JIT on newer GPUs
//
// NVRTC is loaded with dlopen on first use (libnvrtc.so.13, libnvrtc.so, then the same names
// under $CUDA_HOME/lib64 and /usr/local/cuda/lib64), so towerjit builds and runs where CUDA is
// absent; only asking for a CUDA compile there is an error ("NVRTC not found ...").
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace towerjit::cuda {

// True when NVRTC could be loaded (loads it on the first call).
bool nvrtc_available();

// "13.0"; throws towerjit::Error when NVRTC is not available.
std::string nvrtc_version();

// The architecture to compile for, in order: `explicit_arch` (a --arch flag) when non-empty,
// then TOWERJIT_CUDA_ARCH, then `device_arch` (the runtime's device, e.g. "sm_80") when
// given, else "sm_90". Accepts "sm_90", "90" or "compute_90"; returns "sm_NN". Throws
// towerjit::Error for anything else.
std::string resolve_arch(const std::string& explicit_arch = "",
                         const std::optional<std::string>& device_arch = std::nullopt);

struct CudaBinary {
  std::string arch;         // "sm_90"
  std::string ptx;          // text
  std::string cubin;        // ELF for that architecture
  std::string log;          // NVRTC's log (warnings), usually empty
  bool cache_hit = false;
  double compile_ms = 0;    // wall time, cache lookup included
};

// The NVRTC options every module is compiled with (besides --gpu-architecture); part of the
// cache key.
const std::vector<std::string>& nvrtc_flags();

// Compiles `source` for `arch` ("sm_90") through the cache (TOWERJIT_CACHE,
// TOWERJIT_CACHE_DIR; key: source, arch, NVRTC version, flags). With TOWERJIT_DUMP set writes
// <dump>/<module_name>.cu and .ptx. A compile error throws towerjit::Error naming the module,
// the kernel the first error is in, the path of the dumped .cu (TOWERJIT_DUMP, else next to
// the cache) and the full NVRTC log. Thread-safe.
CudaBinary compile_cuda(const std::string& source, const std::string& module_name,
                        const std::string& arch);

// compile_cuda without the dump files: for the parts of a module (module_parts.h), which is
// dumped whole. A compile error still writes the source it names, as compile_cuda's does.
CudaBinary compile_cuda_undumped(const std::string& source, const std::string& module_name,
                                 const std::string& arch);

// The `extern "C" __global__` function whose body holds line `line` (1-based) of `source`,
// or "" when the line is outside every kernel (the preamble).
std::string kernel_at_line(const std::string& source, int line);

}  // namespace towerjit::cuda
