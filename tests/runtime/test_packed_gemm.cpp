// The packed AVX-512 product kernel (runtime/cpu/packed_gemm.h) against a double-precision
// product: odd sizes on either side of its register block (12 rows by 32 columns) and of its
// cache blocks (384 steps of k, 512 columns of B), narrow products (8 to 31 columns, computed
// transposed), every transpose, beta 0 (C unread), 1 and 0.5; its bits whatever slice of C a
// call computes or however a pool cuts it; and an empty depth.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "jit/cpu/cpu_isa.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/packed_gemm.h"
#include "tests/runtime/gemm_oracle.h"

namespace cpujit = towerjit::cpujit;

namespace {

using towerjit::testing::Product;

void check(const Product& z, float beta) { towerjit::testing::check_product(cpujit::packed_sgemm, z, beta); }

bool skipped() {
  if (cpujit::isa_allows(towerjit::knobs::CpuIsa::avx512)) return false;
  WARN("skipped: the packed product kernel needs AVX-512, which TOWERJIT_CPU_ISA or this CPU rules out");
  return true;
}

}  // namespace

TEST_CASE("packed products match a double product within gamma_k, in every transpose and at odd sizes",
          "[cpu][isa]") {
  if (skipped()) return;
  uint32_t seed = 1;
  for (int t = 0; t < 4; ++t) {
    for (int64_t m : {1, 7, 12, 13, 127})
      for (int64_t n : {1, 10, 31, 32, 33, 77})
        for (int64_t k : {1, 7, 127, 385})
          for (float beta : {0.0f, 1.0f, 0.5f}) check(Product(t & 1, t & 2, m, n, k, seed++), beta);
    // Past a packed block of B's 512 columns, and past two blocks of k.
    check(Product(t & 1, t & 2, 25, 545, 64, seed++), 0.5f);
    check(Product(t & 1, t & 2, 13, 33, 800, seed++), 1.0f);
  }
  // An MLP's layer: the product the kernel is for.
  check(Product(false, false, 256, 512, 784, 7), 0.0f);
}

TEST_CASE("packed products: any slice of C has the bits of the whole product", "[cpu][isa]") {
  if (skipped()) return;
  // 800 steps of k: three blocks of sums, whose bounds must not move with the slice. Rows 0-10
  // and 11-36, then columns 0-20 and 21-544 of the rest: cuts across the register blocks and
  // the 512-column blocks of B.
  for (int t = 0; t < 4; ++t)
    towerjit::testing::check_slices_match_whole(cpujit::packed_sgemm, Product(t & 1, t & 2, 37, 545, 800, 40 + t), 11,
                                                21);
}

TEST_CASE("packed products split over a pool have the bits of one thread's", "[cpu][isa]") {
  if (skipped()) return;
  // mlp-large's first layer and its weight gradient, cut by columns and by rows over two
  // threads; 10-column products (computed transposed) by rows, each large enough (at least
  // 4 MFLOP) that sgemm splits it at all.
  struct Shape {
    bool ta;
    int64_t m, n, k;
  };
  for (const Shape& s : {Shape{false, 256, 512, 784}, Shape{true, 784, 512, 256}, Shape{false, 1024, 10, 512},
                         Shape{true, 1568, 10, 256}}) {
    REQUIRE(2.0 * s.m * s.n * s.k >= 4e6);
    const Product z(s.ta, false, s.m, s.n, s.k, 50);
    REQUIRE(cpujit::packed_sgemm_applies(z.m, z.n, z.k));
    std::vector<float> one(z.c.size(), 0.0f), two(z.c.size(), 0.0f);
    towerjit::ThreadPool threads(2);
    cpujit::sgemm(nullptr, z.ta, z.tb, z.m, z.n, z.k, z.a.data(), z.lda, z.b.data(), z.ldb, 0.0f, one.data(), z.ldc);
    cpujit::sgemm(&threads, z.ta, z.tb, z.m, z.n, z.k, z.a.data(), z.lda, z.b.data(), z.ldb, 0.0f, two.data(), z.ldc);
    INFO(s.m << "x" << s.n << "x" << s.k << (s.ta ? " A^T" : ""));
    REQUIRE(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("packed products of no depth scale C by beta, and leave it unread at beta 0", "[cpu][isa]") {
  if (skipped()) return;
  Product z(false, false, 13, 33, 0, 60);
  std::vector<float> c = z.c;
  cpujit::packed_sgemm(false, false, z.m, z.n, 0, z.a.data(), z.lda, z.b.data(), z.ldb, 0.5f, c.data(), z.ldc);
  for (int64_t i = 0; i < z.m; ++i)
    for (int64_t j = 0; j < z.n; ++j) REQUIRE(c[i * z.ldc + j] == 0.5f * z.c[i * z.ldc + j]);
  for (int64_t i = 0; i < z.m; ++i)
    for (int64_t j = 0; j < z.n; ++j) c[i * z.ldc + j] = std::numeric_limits<float>::quiet_NaN();
  cpujit::packed_sgemm(false, false, z.m, z.n, 0, z.a.data(), z.lda, z.b.data(), z.ldb, 0.0f, c.data(), z.ldc);
  for (int64_t i = 0; i < z.m; ++i)
    for (int64_t j = 0; j < z.n; ++j) REQUIRE(c[i * z.ldc + j] == 0.0f);
}
