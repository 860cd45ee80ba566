// Matrix products whose operands fit in one core's L2 cache, with AVX2 and FMA or AVX-512,
// without OpenBLAS. OpenBLAS packs both operands into cache blocks before it multiplies; for an MLP's
// small layers (64 rows, K = 784) that packing and its K blocking cost more than the product:
// 14-18 GFLOP/s where this kernel, reading the operands where they lie, reaches 30-37 on the
// same core (bench/small_gemm_bench.cpp). Larger products stay on OpenBLAS (runtime/cpu/gemm.h).
#pragma once

#include <cstdint>

namespace towerjit::cpujit {

// Whether small_sgemm takes this product: the level is AVX2 or AVX-512 (at the baseline there
// are no FMA registers to block in), C has at least one block's width of columns (16 at AVX2,
// 32 at AVX-512) and at most 128, and op(A) and B together fit in the L2 cache, which the kernel
// relies on instead of packing.
bool small_sgemm_applies(int64_t m, int64_t n, int64_t k);

// C[m, n] = op(A)[m, k] * op(B)[k, n] + beta * C, row-major, as cblas_sgemm with alpha 1 (C is
// not read when beta is 0). Each element of C is one sum over k in order, whatever the slice of
// C a call computes: a product cut into slices has the bits of the whole.
void small_sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace towerjit::cpujit
