// OpenBLAS's sgemm, loaded at first use rather than linked. Debian's OpenBLAS picks its kernels
// by CPU model when it loads, and on CPUs it does not know (new Xeons, some VMs) falls back to
// its slowest SSE3 ("Prescott") kernels — 2-8x slower here. Loading it ourselves lets us name
// the kernels from the CPU's features first (OPENBLAS_CORETYPE), unless the user already has,
// keep it to one thread (the pool and the towers own the cores), and have its idle workers
// sleep rather than spin (OPENBLAS_THREAD_TIMEOUT) after the large products it threads.
#pragma once

#include <string>
#include <vector>

namespace towerjit::cpujit {

struct Blas {
  // cblas_sgemm's signature, with the CBLAS enums as ints.
  using Sgemm = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                         const float* a, int lda, const float* b, int ldb, float beta, float* c,
                         int ldc);
  Sgemm sgemm = nullptr;
  // openblas_set_num_threads, or null (another BLAS). towerjit sets 1 once it has loaded the
  // library and splits products over its own threads (runtime/cpu/gemm.h); the benchmark
  // raises it to time OpenBLAS's own threading.
  void (*set_threads)(int) = nullptr;
  void* handle = nullptr;  // dlopen's handle of the library, for other symbols
  std::string library;  // the file loaded
  std::string core;     // the kernels OpenBLAS chose ("SkylakeX", "Haswell", ...)
  int threads = 1;      // OpenBLAS's thread count when it loaded (its own default)
  // The variables towerjit set in this process before loading it, because the user had not
  // (OPENBLAS_CORETYPE, OPENBLAS_THREAD_TIMEOUT). Child processes inherit them: the
  // benchmark unsets them for its peers, which run as the user's environment has them.
  std::vector<std::string> variables_set;
};

// The process's BLAS, loaded once (thread-safe). Throws towerjit::Error naming the Debian
// package when no OpenBLAS (or reference CBLAS) library can be loaded.
const Blas& blas();

}  // namespace towerjit::cpujit
