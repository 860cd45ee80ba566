#include "runtime/cpu/gemm_half.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "runtime/cpu/amx_gemm.h"
#include "runtime/cpu/bf16_pairs.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/half_spans.h"

namespace towerjit::cpujit {
namespace {

// Below this many flops a product runs on the calling thread (as gemm.cpp's kSplitFlops).
constexpr double kSplitFlops = 4e6;
constexpr int64_t kRows = 8;    // rows of C a kernel call keeps in registers
constexpr int64_t kLanes = 16;  // f32 lanes of a 512-bit register: columns per block

// vdpbf16ps multiplies pairs (bf16_pairs.h): lane j of the result gains a[2j] b[2j] + a[2j+1]
// b[2j+1] (each product exact in f32; the two additions round to nearest even, subnormals
// flushed). So A's words are packed kRows rows at a time, one broadcast to every lane, and B in
// panels of 16 columns (a 4 KiB stride between a panel's pairs aliased in L1: 4x slower at
// n = 1024); rows padded to kRows, columns to two panels.
constexpr Bf16PairShape kShape{kRows, 1, kRows, 1, 2 * kLanes};
static_assert(kLanes == kPanelColumns);

// Rows [first, last) of C (multiples of kRows, within the padded rows), every column. The
// pairs are taken kPairBlock at a time and the columns kColumnBlock at a time, so that the
// slice of packed B a block reads (128 KiB) stays in L2 while every row block passes over it;
// C is the accumulator between pair blocks (still one f32 sum per element, in a fixed order).
constexpr int64_t kPairBlock = 128, kColumnBlock = 256;

__attribute__((target("avx512f,avx512bf16"))) void dot_rows(const Bf16Pairs& p, int64_t n, int64_t m,
                                                            int64_t first, int64_t last, float* c, int64_t ldc) {
  for (int64_t q0 = 0; q0 < p.pairs; q0 += kPairBlock) {
    const int64_t q1 = std::min(p.pairs, q0 + kPairBlock);
    for (int64_t j0 = 0; j0 < n; j0 += kColumnBlock) {
      const int64_t j1 = std::min(n, j0 + kColumnBlock);
      for (int64_t i = first; i < last; i += kRows) {
        const uint32_t* a = p.a_rows(i);  // the block of rows i .. i + kRows - 1
        const int64_t rows = std::min(kRows, m - i);
        // Two panels (32 columns) at a time: 8 accumulators hid vdpbf16ps's latency on Zen 4,
        // where 4 left it exposed; 8 rows (16 accumulators) ran 3-6% faster than 4 on Sapphire
        // Rapids, whose vdpbf16ps does no more flops a cycle than its two FMA pipes in f32 (the
        // padding panel past n is zeros, stored nowhere).
        for (int64_t j = j0; j < j1; j += 2 * kLanes) {
          auto mask_at = [&](int64_t col) {
            return col >= n ? __mmask16{0} : n - col >= kLanes ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - col)) - 1);
          };
          const __mmask16 mask[2] = {mask_at(j), mask_at(j + kLanes)};
          // One flat array, every loop over it unrolled, as direct_conv.cpp keeps its
          // accumulators in registers.
          __m512 acc[2 * kRows];
#pragma GCC unroll 32
          for (int v = 0; v < 2 * kRows; ++v) {
            const int h = v / kRows, r = v % kRows;
            acc[v] = q0 == 0 || r >= rows ? _mm512_setzero_ps()
                                          : _mm512_maskz_loadu_ps(mask[h], c + (i + r) * ldc + j + h * kLanes);
          }
          const uint32_t* panel = p.panel(j);
          for (int64_t q = q0; q < q1; ++q) {
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512(panel + q * kLanes);
            const __m512bh b1 = (__m512bh)_mm512_loadu_si512(panel + (p.pairs + q) * kLanes);
#pragma GCC unroll 16
            for (int r = 0; r < kRows; ++r) {
              const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[q * kRows + r]));
              acc[r] = _mm512_dpbf16_ps(acc[r], av, b0);
              acc[kRows + r] = _mm512_dpbf16_ps(acc[kRows + r], av, b1);
            }
          }
#pragma GCC unroll 32
          for (int v = 0; v < 2 * kRows; ++v)
            if (v % kRows < rows) _mm512_mask_storeu_ps(c + (i + v % kRows) * ldc + j + v / kRows * kLanes, mask[v / kRows], acc[v]);
        }
      }
    }
  }
}

void dot_bf16(ThreadPool* pool, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
              int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  Bf16Pairs& p = this_thread_pairs();
  pack_bf16_pairs(kShape, pool, ta, tb, m, n, k, a, lda, b, ldb, p);
  const int64_t blocks = p.rows / kRows;
  if (!pool || 2.0 * m * n * k < kSplitFlops || blocks < 2) {
    dot_rows(p, n, m, 0, p.rows, c, ldc);
    return;
  }
  pool->parallel_for(blocks, [&](int64_t first, int64_t last) { dot_rows(p, n, m, first * kRows, last * kRows, c, ldc); });
}


// The operands widened to f32 (exact) row by row as they are stored, then sgemm with the same
// transposes.
void widened(ThreadPool* pool, DType dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
             int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  auto widen = [dtype](const uint16_t* from, int64_t rows, int64_t columns, int64_t ld) {
    std::vector<float> out(static_cast<size_t>(rows * columns));
    if (ld == columns) widen_span(from, out.data(), rows * columns, dtype);  // one run
    else
      for (int64_t r = 0; r < rows; ++r) widen_span(from + r * ld, out.data() + r * columns, columns, dtype);
    return out;
  };
  const std::vector<float> af = ta ? widen(a, k, m, lda) : widen(a, m, k, lda);
  const std::vector<float> bf = tb ? widen(b, n, k, ldb) : widen(b, k, n, ldb);
  sgemm(pool, ta, tb, m, n, k, af.data(), ta ? m : k, bf.data(), tb ? k : n, 0.0f, c, ldc);
}

bool use_amx(DType dtype) { return dtype == DType::bf16 && isa_allows(CpuIsa::amx) && amx_tiles_granted(); }
bool use_dot_bf16(DType dtype) { return dtype == DType::bf16 && isa_allows(CpuIsa::avx512bf16); }

}  // namespace

const char* half_gemm_path(DType dtype) {
  return use_amx(dtype) ? "amx tiles" : use_dot_bf16(dtype) ? "vdpbf16ps" : "widened to f32 + sgemm";
}

void half_gemm(ThreadPool* pool, DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
               int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (use_amx(dtype)) amx_bf16_gemm(pool, transpose_a, transpose_b, m, n, k, a, lda, b, ldb, c, ldc);
  else if (use_dot_bf16(dtype)) dot_bf16(pool, transpose_a, transpose_b, m, n, k, a, lda, b, ldb, c, ldc);
  else widened(pool, dtype, transpose_a, transpose_b, m, n, k, a, lda, b, ldb, c, ldc);
}

}  // namespace towerjit::cpujit
