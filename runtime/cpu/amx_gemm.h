// bf16 matrix products on AMX tiles (Sapphire Rapids and later): tdpbf16ps multiplies a 16 x 32
// tile of A by a 32 x 16 tile of B into 16 x 16 f32 sums, 16 times the flops a cycle of
// vdpbf16ps. Taken by half_gemm (gemm_half.h) where cpujit::isa_allows(CpuIsa::amx).
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// C[m, n] = op(A)[m, k] * op(B)[k, n] for bf16 A and B (bit patterns), f32 C, as half_gemm.
void amx_bf16_gemm(ThreadPool* pool, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                   const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc);

}  // namespace towerjit::cpujit
