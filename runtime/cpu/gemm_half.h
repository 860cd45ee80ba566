// Matrix products of bf16 or f16 operands with an f32 accumulator and an f32 result, the
// CPU's half of a mixed-precision matmul. bf16 products run on AMX tiles (amx_gemm.h) where
// cpujit::isa_allows(CpuIsa::amx), else on AVX512_BF16's vdpbf16ps where it allows
// CpuIsa::avx512bf16 (the CPU has it and TOWERJIT_CPU_ISA does not cap it); everything else
// widens the operands to f32 (exactly) and runs OpenBLAS's sgemm (gemm.h). Each way each product
// of two elements is exact in f32 and only the f32 sums round, so all meet the reference's f32
// bound for the rounded operands.
#pragma once

#include <cstdint>

#include "dsl/dtype.h"
#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// C[m, n] = op(A)[m, k] * op(B)[k, n], A and B the bit patterns of `dtype` (bf16 or f16),
// op transposing when asked (A is then stored [k, m], B [n, k]), row-major, as sgemm's.
void half_gemm(ThreadPool* pool, DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
               int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc);

// Which kernel half_gemm runs for `dtype` at the current CPU level: "amx tiles", "vdpbf16ps" or
// "widened to f32 + sgemm" (for tests and the benchmark's labels).
const char* half_gemm_path(DType dtype);

}  // namespace towerjit::cpujit
