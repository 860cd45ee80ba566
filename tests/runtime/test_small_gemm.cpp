// The small-product kernel (runtime/cpu/small_gemm.h) against a double-precision product, at
// odd sizes, in every transpose, with beta 0 (C unread), 1 and 0.5, strides wider than the
// matrices and C's neighbours watched; and its bits whatever slice of C a call computes.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "jit/cpu/cpu_isa.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/small_gemm.h"
#include "tests/runtime/gemm_oracle.h"

namespace cpujit = towerjit::cpujit;

namespace {

using towerjit::testing::Product;

void check(const Product& z, float beta) { towerjit::testing::check_product(cpujit::small_sgemm, z, beta); }

}  // namespace

TEST_CASE("small products match a double product within gamma_k, in every transpose and at odd sizes", "[cpu][isa]") {
  if (!cpujit::isa_allows(towerjit::knobs::CpuIsa::avx2)) {
    WARN("skipped: the small-product kernel needs AVX2 and FMA, which TOWERJIT_CPU_ISA or this CPU rules out");
    return;
  }
  uint32_t seed = 1;
  for (int t = 0; t < 4; ++t)
    for (int64_t m : {1, 5, 6, 7, 12, 13})
      for (int64_t n : {1, 7, 8, 10, 16, 17, 32, 33, 48})
        for (int64_t k : {1, 7, 127})
          for (float beta : {0.0f, 1.0f, 0.5f}) check(Product(t & 1, t & 2, m, n, k, seed++), beta);
  // An MLP's layer: the product the kernel is for.
  check(Product(false, false, 64, 64, 784, 7), 0.0f);
  check(Product(true, false, 784, 64, 64, 8), 0.0f);
}

TEST_CASE("small products: any slice of C has the bits of the whole product", "[cpu][isa]") {
  if (!cpujit::isa_allows(towerjit::knobs::CpuIsa::avx2)) {
    WARN("skipped: the small-product kernel needs AVX2 and FMA, which TOWERJIT_CPU_ISA or this CPU rules out");
    return;
  }
  // Rows 0-10 and 11-36, then columns 0-20 and 21-44 of the rest: cuts across the blocks of
  // either level (6 rows by 16 columns at AVX2, 12 by 32 at AVX-512).
  for (int t = 0; t < 4; ++t)
    towerjit::testing::check_slices_match_whole(cpujit::small_sgemm, Product(t & 1, t & 2, 37, 45, 127, 40 + t), 11,
                                                21);
}

TEST_CASE("small products split over a pool have the bits of one thread's", "[cpu][isa]") {
  // 64x64x784 (6.4 MFLOP) is cut into slices by rows over two threads; 784x64x64 transposed too.
  for (const bool ta : {false, true}) {
    const Product z(ta, false, ta ? 784 : 64, 64, ta ? 64 : 784, 50);
    if (!cpujit::small_sgemm_applies(z.m, z.n, z.k)) {
      WARN("skipped: products of this size go to OpenBLAS at this level or with this L2 cache");
      continue;
    }
    std::vector<float> one(z.c.size(), 0.0f), two(z.c.size(), 0.0f);
    towerjit::ThreadPool threads(2);
    cpujit::sgemm(nullptr, z.ta, z.tb, z.m, z.n, z.k, z.a.data(), z.lda, z.b.data(), z.ldb, 0.0f, one.data(), z.ldc);
    cpujit::sgemm(&threads, z.ta, z.tb, z.m, z.n, z.k, z.a.data(), z.lda, z.b.data(), z.ldb, 0.0f, two.data(), z.ldc);
    INFO((ta ? "784x64x64 A^T" : "64x64x784"));
    REQUIRE(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  }
}
