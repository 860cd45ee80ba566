// Large matrix products at AVX-512 without OpenBLAS: operands packed into cache blocks, then a
// register block of 12 rows by 32 columns of C (24 of the 32 vector registers). On a Sapphire
// Rapids core OpenBLAS's SkylakeX sgemm ran at 130-148 GFLOP/s one thread, 65-74% of the 200
// that independent FMAs reach there; this kernel alone reaches 165-175, and the whole product
// 1.09-1.16x OpenBLAS's rate on the MLP's layers (bench/small_gemm_bench.cpp;
// docs/performance.md). Products that fit the L2 cache with few columns stay on small_gemm.h's
// kernel, and every level below AVX-512 on OpenBLAS (runtime/cpu/gemm.h).
#pragma once

#include <cstdint>

namespace towerjit::cpujit {

// Whether packed_sgemm takes this product: the level is AVX-512, and the product has at least
// a register block's rows and columns, or 8 to 31 columns and at least 32 rows (computed
// transposed: a classifier's logits). It wins at any depth once the packing is vectorised (a
// 33x45x17 product with both operands transposed: 1.17x OpenBLAS).
bool packed_sgemm_applies(int64_t m, int64_t n, int64_t k);

// C[m, n] = op(A)[m, k] * op(B)[k, n] + beta * C, row-major, as cblas_sgemm with alpha 1 (C is
// not read when beta is 0). Each element of C is summed over k in blocks of at most 384 steps
// whose bounds depend on k alone, each block's sum added to C in order: the bits do not depend
// on which slice of C a call computes. Needs AVX-512 (packed_sgemm_applies).
void packed_sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace towerjit::cpujit
