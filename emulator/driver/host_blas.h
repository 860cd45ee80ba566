// OpenBLAS's cblas_sgemm, which the emulator's cuBLAS, cuBLASLt and cuDNN compute with on the host
// (loaded with dlopen, as towerjit's CPU backend does). Null when no CBLAS library opens.
#pragma once

#include <dlfcn.h>

namespace towerjit::emulator {

using HostSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                           int);
inline constexpr int kCblasColMajor = 102, kCblasNoTrans = 111, kCblasTrans = 112;

inline HostSgemm host_sgemm() {
  static const HostSgemm f = [] {
    for (const char* name : {"libopenblas.so.0", "libopenblas.so", "libcblas.so.3", "libblas.so.3"})
      if (void* h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))
        if (auto fn = reinterpret_cast<HostSgemm>(::dlsym(h, "cblas_sgemm"))) return fn;
    return HostSgemm{nullptr};
  }();
  return f;
}

}  // namespace towerjit::emulator
