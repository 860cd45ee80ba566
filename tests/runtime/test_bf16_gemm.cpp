// bf16 products (runtime/cpu/gemm_half.h) at each kernel this CPU has (AMX tiles, vdpbf16ps,
// widened to f32 + sgemm) against a double-precision product of the same bf16 operands: odd
// sizes around the kernels' blocks, every transpose, strides wider than the matrices with C's
// neighbours watched, and towerjit's own kernels' same bits on 1, 2 and 3 threads.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dsl/half_float.h"
#include "jit/cpu/cpu_isa.h"
#include "runtime/cpu/gemm_half.h"
#include "runtime/thread_pool.h"
#include "tests/jit/cpu_test_env.h"
#include "tests/runtime/f32_gamma.h"

namespace tj = towerjit;
namespace cpujit = towerjit::cpujit;
using tj::knobs::CpuIsa;

namespace {

using towerjit::testing::f32_gamma;

struct Product {
  bool ta, tb;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;  // each wider than the matrix
  std::vector<uint16_t> a, b;

  Product(bool ta_, bool tb_, int64_t m_, int64_t n_, int64_t k_, uint32_t seed)
      : ta(ta_), tb(tb_), m(m_), n(n_), k(k_), lda((ta_ ? m_ : k_) + 3), ldb((tb_ ? k_ : n_) + 5), ldc(n_ + 4) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    a.resize((ta ? k : m) * lda);
    b.resize((tb ? n : k) * ldb);
    for (uint16_t& v : a) v = tj::half_bits(u(rng), tj::DType::bf16);
    for (uint16_t& v : b) v = tj::half_bits(u(rng), tj::DType::bf16);
  }
  double at_a(int64_t i, int64_t p) const { return tj::half_value(ta ? a[p * lda + i] : a[i * lda + p], tj::DType::bf16); }
  double at_b(int64_t p, int64_t j) const { return tj::half_value(tb ? b[j * ldb + p] : b[p * ldb + j], tj::DType::bf16); }

  std::vector<float> run(tj::ThreadPool* pool) const {
    std::vector<float> c(m * ldc, -7.0f);  // C's stride padding must keep this
    cpujit::half_gemm(pool, tj::DType::bf16, ta, tb, m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc);
    return c;
  }
};

// Each product of two bf16 values is exact in f32, so only the k - 1 additions round: within
// gamma(k) of the sum of the products' magnitudes, in any order of summation.
void check_bound(const Product& z, const std::vector<float>& c) {
  for (int64_t i = 0; i < z.m; ++i)
    for (int64_t j = 0; j < z.ldc; ++j) {
      const float got = c[i * z.ldc + j];
      if (j >= z.n) {
        REQUIRE(got == -7.0f);
        continue;
      }
      double exact = 0.0, magnitude = 0.0;
      for (int64_t p = 0; p < z.k; ++p) {
        exact += z.at_a(i, p) * z.at_b(p, j);
        magnitude += std::fabs(z.at_a(i, p) * z.at_b(p, j));
      }
      INFO("C[" << i << ", " << j << "] = " << got << ", exact " << exact);
      REQUIRE(std::fabs(got - exact) <= f32_gamma(z.k) * magnitude);
    }
}

// The levels whose bf16 kernels differ and this CPU has.
std::vector<CpuIsa> bf16_levels() {
  std::vector<CpuIsa> out;
  for (CpuIsa level : {CpuIsa::amx, CpuIsa::avx512bf16, CpuIsa::avx2})
    if (level <= cpujit::widest_isa()) out.push_back(level);
  return out;
}

}  // namespace

TEST_CASE("bf16 products within the f32 bound at every kernel, the same bits on any thread count",
          "[half][cpu][threads]") {
  tj::ThreadPool two(2), three(3);
  struct Dims { int64_t m, n, k; };
  for (CpuIsa level : bf16_levels()) {
    tj::test::ScopedEnv isa("TOWERJIT_CPU_ISA", cpujit::isa_name(level));
    for (Dims d : {Dims{1, 1, 1}, Dims{7, 7, 7}, Dims{16, 16, 32}, Dims{33, 31, 33}, Dims{127, 65, 1},
                   Dims{64, 160, 95}, Dims{300, 200, 301}})  // the last: 36 MFLOP, split over a pool
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const Product z(ta, tb, d.m, d.n, d.k, static_cast<uint32_t>(d.m * 131 + d.k));
          INFO(cpujit::half_gemm_path(tj::DType::bf16) << ": " << d.m << "x" << d.n << "x" << d.k << (ta ? " A^T" : "")
                                                       << (tb ? " B^T" : ""));
          const std::vector<float> one = z.run(nullptr);
          check_bound(z, one);
          for (tj::ThreadPool* pool : {&two, &three}) {
            const std::vector<float> split = z.run(pool);
            if (level == CpuIsa::avx2) check_bound(z, split);  // OpenBLAS's: bits not promised
            else REQUIRE(std::memcmp(split.data(), one.data(), one.size() * sizeof(float)) == 0);
          }
        }
  }
}
