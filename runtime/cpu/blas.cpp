#include "runtime/cpu/blas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <source_location>

#include "dsl/error.h"
#include "runtime/cpu/cpu_features.h"

namespace towerjit::cpujit {
namespace {

// The OpenBLAS kernels for this CPU's widest vector unit.
const char* core_for_this_cpu() {
  if (has_avx512f() && __builtin_cpu_supports("avx512bw")) return "SkylakeX";
  if (has_avx2_fma()) return "Haswell";
  return nullptr;  // let OpenBLAS decide
}

Blas load() {
  // OPENBLAS_CORETYPE is OpenBLAS's own knob, read when the library loads; a user's value wins.
  if (!std::getenv("OPENBLAS_CORETYPE"))
    if (const char* core = core_for_this_cpu()) ::setenv("OPENBLAS_CORETYPE", core, 0);
  Blas b;
  for (const char* name : {"libopenblas.so.0", "libopenblas.so", "libcblas.so.3", "libblas.so.3"}) {
    void* handle = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!handle) continue;
    b.sgemm = reinterpret_cast<Blas::Sgemm>(::dlsym(handle, "cblas_sgemm"));
    if (!b.sgemm) continue;
    b.library = name;
    using CoreName = char* (*)();
    auto core_name = reinterpret_cast<CoreName>(::dlsym(handle, "openblas_get_corename"));
    b.core = core_name ? core_name() : "reference";
    using Threads = int (*)();
    if (auto threads = reinterpret_cast<Threads>(::dlsym(handle, "openblas_get_num_threads"))) b.threads = threads();
    b.set_threads = reinterpret_cast<void (*)(int)>(::dlsym(handle, "openblas_set_num_threads"));
    if (b.set_threads) b.set_threads(1);
    return b;
  }
  user_check(false, std::source_location::current())
      << "no BLAS library found (tried libopenblas.so.0, libopenblas.so, libcblas.so.3, "
      << "libblas.so.3); install Debian's "
      << "libopenblas0 (scripts/install-deps.sh does)";
  return b;
}

}  // namespace

const Blas& blas() {
  static const Blas instance = load();
  return instance;
}

}  // namespace towerjit::cpujit
