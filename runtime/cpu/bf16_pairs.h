// bf16 operands of a matrix product packed as pairs along k, the layout both bf16 kernels read:
// AVX512_BF16's vdpbf16ps (gemm_half.cpp) and AMX's tdpbf16ps (amx_gemm.cpp) multiply two
// k-neighbours at a time, a[2q] b[2q] + a[2q+1] b[2q+1], reading each pair as one 32-bit word
// (the first element in the low half).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// How a kernel wants the packed operands padded (with zeros, which add nothing to a sum).
// A is stored in blocks of R = a_block_rows rows by P = a_block_pairs pairs, each [R][P], the
// blocks of R rows one after another, each [pairs / P][R][P]: word (i, q) at
// ((i / R) (pairs / P) + q / P) R P + (i % R) P + q % P. vdpbf16ps's blocks are 8 x 1 (a pair's
// 8 rows side by side, one broadcast at a time), AMX's 16 x 16 (a tile, 1 KiB in a row).
struct Bf16PairShape {
  int64_t a_block_rows, a_block_pairs;
  int64_t row_multiple;     // rows padded to a multiple of this (itself a multiple of a_block_rows)
  int64_t pair_multiple;    // pairs padded to a multiple of this (itself a multiple of a_block_pairs)
  int64_t column_multiple;  // columns padded to a multiple of this (itself a multiple of kPanelColumns)
};

// B is stored in panels of 16 columns, each [pair][column]: a panel's words for one pair are
// 64 bytes side by side, its pairs one after another.
constexpr int64_t kPanelColumns = 16;

// The packed operands. Their buffers only grow: a thread packing product after product into
// one Bf16Pairs (as both kernels do, one per thread) allocates once, not per product (fresh
// megabytes a product had cost page faults on every call).
struct Bf16Pairs {
  int64_t pairs = 0, rows = 0, columns = 0;  // padded as the shape asked
  std::vector<uint32_t> a;                   // blocks of rows x pairs, as Bf16PairShape says
  std::vector<uint32_t> b;                   // [columns / kPanelColumns][pairs][kPanelColumns]

  // A's block of rows from row i (a multiple of a_block_rows), and the panel holding column j.
  const uint32_t* a_rows(int64_t i) const { return a.data() + i * pairs; }
  const uint32_t* panel(int64_t j) const { return b.data() + j / kPanelColumns * pairs * kPanelColumns; }
};

// The calling thread's Bf16Pairs, kept from product to product. A reference to it may be handed
// to the pool's workers (a thread_local named inside their lambda would be each worker's own).
Bf16Pairs& this_thread_pairs();

// op(A)[m, k] and op(B)[k, n] of bf16 bit patterns (row-major; A stored [k, m] when
// transpose_a, B [n, k] when transpose_b) packed into `out` for `shape`, every word (padding
// too) written once, over `pool` when it is worth it.
void pack_bf16_pairs(const Bf16PairShape& shape, ThreadPool* pool, bool transpose_a, bool transpose_b, int64_t m,
                     int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                     Bf16Pairs& out);

}  // namespace towerjit::cpujit
