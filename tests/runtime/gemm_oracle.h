// The oracle of the matrix-product kernels' tests (test_small_gemm.cpp, test_packed_gemm.cpp):
// random operands at strides wider than the matrices, and C checked against a double-precision
// product within the worst-case bound of float32 sums, C's stride padding watched.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/runtime/f32_gamma.h"

namespace towerjit::testing {

struct Product {
  bool ta, tb;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;  // each wider than the matrix by a few floats
  std::vector<float> a, b, c;

  Product(bool ta_, bool tb_, int64_t m_, int64_t n_, int64_t k_, uint32_t seed)
      : ta(ta_), tb(tb_), m(m_), n(n_), k(k_) {
    lda = (ta ? m : k) + 3;
    ldb = (tb ? k : n) + 5;
    ldc = n + 4;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    a.resize((ta ? k : m) * lda);
    b.resize((tb ? n : k) * ldb);
    c.resize(m * ldc);
    for (float& v : a) v = u(rng);
    for (float& v : b) v = u(rng);
    for (float& v : c) v = u(rng);
  }
  double at_a(int64_t i, int64_t p) const { return ta ? a[p * lda + i] : a[i * lda + p]; }
  double at_b(int64_t p, int64_t j) const { return tb ? b[j * ldb + p] : b[p * ldb + j]; }
};

// The kernel under test: C = op(A) op(B) + beta C as cblas_sgemm with alpha 1.
using Sgemm = void (*)(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float,
                       float*, int64_t);

// Checks `sgemm`'s C for the product against a double-precision one, element by element within
// gamma_(k+2) of the sum of magnitudes: k products summed in any order or in blocks (each
// block's sum then added), and beta * C added.
inline void check_product(Sgemm sgemm, const Product& z, float beta) {
  const std::string what = std::to_string(z.m) + "x" + std::to_string(z.n) + "x" + std::to_string(z.k) +
                           (z.ta ? " A^T" : "") + (z.tb ? " B^T" : "") + " beta " + std::to_string(beta);
  std::vector<float> c = z.c;
  // beta 0: C is not read, so a NaN there must not reach the result.
  if (beta == 0.0f)
    for (int64_t i = 0; i < z.m; ++i)
      for (int64_t j = 0; j < z.n; ++j) c[i * z.ldc + j] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> before = c;
  sgemm(z.ta, z.tb, z.m, z.n, z.k, z.a.data(), z.lda, z.b.data(), z.ldb, beta, c.data(), z.ldc);
  INFO(what);
  for (int64_t i = 0; i < z.m; ++i) {
    for (int64_t j = 0; j < z.ldc; ++j) {
      const float got = c[i * z.ldc + j];
      if (j >= z.n) {  // C's stride padding is never written
        REQUIRE(std::memcmp(&got, &before[i * z.ldc + j], sizeof got) == 0);
        continue;
      }
      double exact = 0.0, magnitude = 0.0;
      for (int64_t p = 0; p < z.k; ++p) {
        exact += z.at_a(i, p) * z.at_b(p, j);
        magnitude += std::fabs(z.at_a(i, p) * z.at_b(p, j));
      }
      if (beta != 0.0f) {
        exact += beta * static_cast<double>(z.c[i * z.ldc + j]);
        magnitude += std::fabs(beta * static_cast<double>(z.c[i * z.ldc + j]));
      }
      const double bound = f32_gamma(z.k + 2) * magnitude;
      INFO("C[" << i << ", " << j << "] = " << got << ", exact " << exact << ", bound " << bound);
      REQUIRE(std::fabs(got - exact) <= bound);
    }
  }
}

// Computes the product whole, then in three slices: rows [0, row_cut) whole, and of the rest
// columns [0, col_cut) and [col_cut, n). Requires the two results' bits to be equal.
inline void check_slices_match_whole(Sgemm sgemm, const Product& z, int64_t row_cut, int64_t col_cut) {
  std::vector<float> whole(z.c.size(), 0.0f), sliced(z.c.size(), 0.0f);
  sgemm(z.ta, z.tb, z.m, z.n, z.k, z.a.data(), z.lda, z.b.data(), z.ldb, 0.0f, whole.data(), z.ldc);
  const float* a_rest = z.ta ? z.a.data() + row_cut : z.a.data() + row_cut * z.lda;
  const float* b_right = z.tb ? z.b.data() + col_cut * z.ldb : z.b.data() + col_cut;
  float* c_rest = sliced.data() + row_cut * z.ldc;
  sgemm(z.ta, z.tb, row_cut, z.n, z.k, z.a.data(), z.lda, z.b.data(), z.ldb, 0.0f, sliced.data(), z.ldc);
  sgemm(z.ta, z.tb, z.m - row_cut, col_cut, z.k, a_rest, z.lda, z.b.data(), z.ldb, 0.0f, c_rest, z.ldc);
  sgemm(z.ta, z.tb, z.m - row_cut, z.n - col_cut, z.k, a_rest, z.lda, b_right, z.ldb, 0.0f, c_rest + col_cut, z.ldc);
  INFO(z.m << "x" << z.n << "x" << z.k << (z.ta ? " A^T" : "") << (z.tb ? " B^T" : ""));
  REQUIRE(std::memcmp(whole.data(), sliced.data(), whole.size() * sizeof(float)) == 0);
}

}  // namespace towerjit::testing
