#include "runtime/cpu/blas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <source_location>

#include "dsl/error.h"
#include "runtime/cpu/cpu_features.h"

namespace towerjit::cpujit {
namespace {

Blas load() {
  // OPENBLAS_CORETYPE is OpenBLAS's own knob, read when the library loads (so once per
  // process, whatever TOWERJIT_CPU_ISA says later); a user's value wins.
  if (!std::getenv("OPENBLAS_CORETYPE"))
    ::setenv("OPENBLAS_CORETYPE", openblas_core(cpu_isa()), 0);
  Blas b;
  for (const char* name : {"libopenblas.so.0", "libopenblas.so", "libcblas.so.3", "libblas.so.3"}) {
    void* handle = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!handle) continue;
    b.sgemm = reinterpret_cast<Blas::Sgemm>(::dlsym(handle, "cblas_sgemm"));
    if (!b.sgemm) continue;
    b.library = name;
    b.handle = handle;
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
