// bf16 matrix products on AMX tiles (Sapphire Rapids and later): tdpbf16ps multiplies a 16 x 32
// tile of A by a 32 x 16 tile of B into 16 x 16 f32 sums, 16 times the flops a cycle of
// vdpbf16ps. Taken by half_gemm (gemm_half.h) where cpujit::isa_allows(CpuIsa::amx).
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// Asks Linux, once a process, for the tile registers' state (arch_prctl ARCH_REQ_XCOMP_PERM):
// until then a tile instruction faults. Asked by the first product on tiles, not when the CPU
// level is read, so a process that never multiplies bf16 keeps the thread state and signal
// frames of one without AMX. False where Linux refuses (a thread's alternate signal stack too
// small for the tiles' 8 KiB, say): half_gemm then runs vdpbf16ps.
bool amx_tiles_granted();

// C[m, n] = op(A)[m, k] * op(B)[k, n] for bf16 A and B (bit patterns), f32 C, as half_gemm; only
// once amx_tiles_granted().
void amx_bf16_gemm(ThreadPool* pool, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                   const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc);

}  // namespace towerjit::cpujit
