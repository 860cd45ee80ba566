// towerjit_half_gemm_bench: bf16 and f16 matrix products (runtime/cpu/gemm_half.h) against
// OpenBLAS's sgemm on the same shapes, one thread, at the CPU level TOWERJIT_CPU_ISA allows.
// Prints one line per shape and path: milliseconds (best of the repeats) and GFLOP/s.
//
//   build/bench/towerjit_half_gemm_bench [repeats]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "dsl/half_float.h"
#include "jit/cpu/cpu_isa.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/gemm_half.h"

namespace tj = towerjit;

namespace {

template <typename F>
double best_ms(int repeats, F run) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 7;
  std::printf("CPU level %s (%s)\n", tj::cpujit::isa_name(tj::cpujit::cpu_isa()), tj::cpujit::cpu_description().c_str());
  std::printf("%-16s %-28s %9s %9s\n", "m x k x n", "path", "ms", "GFLOP/s");
  struct Dims { int64_t m, k, n; };
  for (Dims d : {Dims{256, 784, 512}, Dims{512, 512, 512}, Dims{1024, 1024, 1024}}) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<float> a(d.m * d.k), b(d.k * d.n), c(d.m * d.n);
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
    const double gflop = 2.0 * d.m * d.n * d.k / 1e9;
    char dims[32];
    std::snprintf(dims, sizeof dims, "%ldx%ldx%ld", static_cast<long>(d.m), static_cast<long>(d.k), static_cast<long>(d.n));
    const double f32 = best_ms(repeats, [&] {
      tj::cpujit::sgemm(nullptr, false, false, d.m, d.n, d.k, a.data(), d.k, b.data(), d.n, 0.0f, c.data(), d.n);
    });
    std::printf("%-16s %-28s %9.2f %9.1f\n", dims, "f32 sgemm", f32, gflop / f32 * 1e3);
    for (tj::DType t : {tj::DType::bf16, tj::DType::f16}) {
      std::vector<uint16_t> ah(a.size()), bh(b.size());
      for (size_t i = 0; i < a.size(); ++i) ah[i] = tj::half_bits(a[i], t);
      for (size_t i = 0; i < b.size(); ++i) bh[i] = tj::half_bits(b[i], t);
      const double ms = best_ms(repeats, [&] {
        tj::cpujit::half_gemm(nullptr, t, false, false, d.m, d.n, d.k, ah.data(), d.k, bh.data(), d.n, c.data(), d.n);
      });
      const std::string path = std::string(tj::dtype_name(t)) + " " + tj::cpujit::half_gemm_path(t);
      std::printf("%-16s %-28s %9.2f %9.1f\n", dims, path.c_str(), ms, gflop / ms * 1e3);
    }
  }
}
