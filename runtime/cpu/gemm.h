// Row-major sgemm split over the thread pool. towerjit runs OpenBLAS on one thread
// (runtime/cpu/blas.h) and splits products itself: OpenBLAS's own threads would otherwise
// compete for the same cores with the pool's and with CPU towers (two towers on two cores
// each calling a two-thread OpenBLAS ran the demo 2.5-3.5x slower).
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// C[m, n] = op(A)[m, k] * op(B)[k, n] + beta * C, op transposing when asked (A is then stored
// [k, m], B [n, k]). Without a pool, or for a small product: one single-threaded call. With a
// pool: the product is cut along the larger of m and n into one slice per thread (multiples of
// 16 where it allows), each slice a single-threaded call. The kernel is decided once for the
// whole product: the small-product kernel where it applies (runtime/cpu/small_gemm.h: operands
// in L2), else the packed kernel at AVX-512 (runtime/cpu/packed_gemm.h), else OpenBLAS. Large
// products once ran on OpenBLAS's own threads instead; with the pool's threads spinning between
// loops (runtime/thread_pool.h) a woken OpenBLAS thread was queued behind a busy core, and in
// the step slices are faster (mlp-large 4.3 -> 3.7 ms on Sapphire Rapids; docs/performance.md).
void sgemm(ThreadPool* pool, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace towerjit::cpujit
