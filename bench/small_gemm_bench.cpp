// towerjit_small_gemm_bench: the products the small-product kernel (runtime/cpu/small_gemm.h)
// and the packed kernel (runtime/cpu/packed_gemm.h) take, against OpenBLAS's sgemm on one
// thread, at the level TOWERJIT_CPU_ISA sets: the bench's MLP, cnn and gpt-small products.
// Timed in the thread's CPU time (time it was not running does not count, so a shared machine
// moves the figures less), best of `--repeats` (default 7) runs of enough calls for about 20
// ms. One JSON line per product.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include <cblas.h>

#include "bench/best_time.h"
#include "jit/cpu/cpu_isa.h"
#include "runtime/cpu/blas.h"
#include "runtime/cpu/packed_gemm.h"
#include "runtime/cpu/small_gemm.h"

namespace cpujit = towerjit::cpujit;

namespace {

struct Shape {
  const char* product;
  bool ta, tb;
  int m, n, k;
};

// Each workload's products (forward, then the weight and input gradients), as the CPU backend
// calls them; a product cut into slices by the pool is listed at one thread's slice.
const Shape kShapes[] = {
    {"mlp-small fc1 (a slice of two)", false, false, 32, 64, 784},
    {"mlp-small fc1", false, false, 64, 64, 784},
    {"mlp-small fc2", false, false, 64, 64, 64},
    {"mlp-small logits", false, false, 64, 10, 64},
    {"mlp-small fc1 weight gradient (a slice of two)", true, false, 392, 64, 64},
    {"mlp-small fc2 weight gradient", true, false, 64, 64, 64},
    {"mlp-small fc2 input gradient", false, true, 64, 64, 64},
    {"mlp-small logits input gradient", false, true, 64, 64, 10},
    {"cnn logits", false, false, 128, 10, 1568},
    {"cnn logits weight gradient", true, false, 1568, 10, 128},
    {"cnn logits input gradient", false, true, 128, 1568, 10},
    {"gpt-small projection (a slice of two)", false, false, 1024, 64, 64},
    {"gpt-small mlp up (a slice of two)", false, false, 1024, 256, 64},
    {"gpt-small mlp down (a slice of two)", false, false, 1024, 64, 256},
    // Taken only where op(A) and B fit a 2 MiB L2 (Sapphire Rapids' cores): the whole product
    // is what small_sgemm_applies judges, so each is listed at its size and at one slice.
    {"mlp-large fc2", false, false, 256, 512, 512},
    {"mlp-large fc2 (a slice of two)", false, false, 128, 512, 512},
    {"mlp-large fc2 weight gradient (a slice of two)", true, false, 256, 512, 256},
    {"mlp-large fc2 input gradient (a slice of two)", false, true, 128, 512, 512},
    // The packed kernel's: larger than L2 or wider than 128 columns.
    {"mlp-large fc1 (a slice of two)", false, false, 256, 256, 784},
    {"mlp-large fc1 weight gradient (a slice of two)", true, false, 392, 512, 256},
    {"mlp-large fc2 weight gradient", true, false, 512, 512, 256},
    {"mlp-large fc2 input gradient", false, true, 256, 512, 512},
    {"gpt-small mlp up", false, false, 2048, 256, 64},
    {"odd sizes", false, false, 127, 77, 300},
    {"odd sizes, both transposed", true, true, 127, 77, 300},
    {"shallow, both transposed", true, true, 33, 45, 17},
    {"square", false, false, 1024, 1024, 1024},
};

}  // namespace

int main(int argc, char** argv) {
  int repeats = 7;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = std::atoi(argv[++i]);
  const cpujit::Blas& blas = cpujit::blas();
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Shape& s : kShapes) {
    std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n),
        c(static_cast<size_t>(s.m) * s.n);
    for (float& v : a) v = u(rng);
    for (float& v : b) v = u(rng);
    const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    const double flops = 2.0 * s.m * s.n * s.k;
    const int calls = std::max(1, static_cast<int>(0.02 * 30e9 / flops));
    const double openblas = bench::best_seconds([&] {
      blas.sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k,
                 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n);
    }, calls, repeats);
    const bool applies = cpujit::small_sgemm_applies(s.m, s.n, s.k);
    const double small = !applies ? 0.0 : bench::best_seconds([&] {
      cpujit::small_sgemm(s.ta, s.tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n);
    }, calls, repeats);
    std::printf("{\"product\": \"%s\", \"isa\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"transpose_a\": %s, "
                "\"transpose_b\": %s, \"openblas_gflops\": %.1f, ",
                s.product, cpujit::isa_name(cpujit::cpu_isa()), s.m, s.n, s.k, s.ta ? "true" : "false",
                s.tb ? "true" : "false", flops / openblas / 1e9);
    if (applies)
      std::printf("\"small_gflops\": %.1f, \"small_speedup\": %.2f, ", flops / small / 1e9, openblas / small);
    else
      std::printf("\"small_gflops\": null, ");
    // Timed wherever the level has it, taken or not, so its thresholds can be read off.
    if (cpujit::vector_level(cpujit::cpu_isa()) == cpujit::CpuIsa::avx512) {
      const double packed = bench::best_seconds([&] {
        cpujit::packed_sgemm(s.ta, s.tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n);
      }, calls, repeats);
      std::printf("\"packed_gflops\": %.1f, \"packed_speedup\": %.2f, ", flops / packed / 1e9, openblas / packed);
    }
    const char* taken = applies                                            ? "small"
                        : cpujit::packed_sgemm_applies(s.m, s.n, s.k) ? "packed"
                                                                           : "openblas";
    std::printf("\"taken\": \"%s\"}\n", taken);
  }
}
