#include "runtime/cpu/blas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <source_location>

#include "dsl/error.h"
#include "jit/knobs.h"
#include "runtime/cpu/cpu_features.h"

namespace towerjit::cpujit {
namespace {

// Sets an OpenBLAS variable the user has not set, and records that we did. Under the
// environment's lock: other threads may be reading knobs (knobs.h).
void set_unless_users(const char* name, const char* value, Blas& b) {
  std::unique_lock lock(knobs::environment_mutex());
  if (std::getenv(name)) return;
  ::setenv(name, value, 0);
  b.variables_set.push_back(name);
}

Blas load() {
  Blas b;
  // OpenBLAS's own knobs, read when the library loads (so once per process, whatever
  // TOWERJIT_CPU_ISA says later); a user's values win.
  set_unless_users("OPENBLAS_CORETYPE", openblas_core(cpu_isa()), b);
  // After each product it threads (gemm.cpp: the largest ones), OpenBLAS's workers poll for
  // more work, calling sched_yield, for 2^28 cycles by default (about 0.1 s) before they sleep.
  // The pool's workers need those cores for the kernels that follow, and a thread that yields
  // stays runnable and keeps its share of a core: the step of a GPT whose weight gradients
  // are such products took 69 instead of 48 ms on 2 cores (docs/performance.md). 4 is
  // OpenBLAS's least (2^4 cycles): the workers sleep at once, and the next threaded product
  // wakes them, a few microseconds against its milliseconds.
  set_unless_users("OPENBLAS_THREAD_TIMEOUT", "4", b);
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
