#include "runtime/cpu/gemm_half.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "dsl/half_float.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/gemm.h"

namespace towerjit::cpujit {
namespace {

// Below this many flops a product runs on the calling thread (as gemm.cpp's kSplitFlops).
constexpr double kSplitFlops = 4e6;
constexpr int64_t kRows = 4;    // rows of C a kernel call keeps in registers
constexpr int64_t kLanes = 16;  // f32 lanes of a 512-bit register: columns per block

// vdpbf16ps multiplies pairs: lane j of the result gains a[2j] b[2j] + a[2j+1] b[2j+1] (each
// product exact in f32; the two additions round to nearest even, subnormals flushed). So A is
// packed as pairs along k, one 32-bit word per (row, pair), broadcast to every lane, and B as
// [pair][column][2]: the two k-neighbours of a column side by side. An odd k pads with zeros.
struct Packed {
  int64_t pairs = 0, rows = 0, columns = 0;  // rows padded to kRows, columns to kLanes
  std::vector<uint32_t> a;                   // [rows][pairs]
  std::vector<uint16_t> b;                   // [pairs][columns][2]
};

Packed pack(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
            const uint16_t* b, int64_t ldb) {
  Packed p;
  p.pairs = (k + 1) / 2;
  p.rows = (m + kRows - 1) / kRows * kRows;
  p.columns = (n + kLanes - 1) / kLanes * kLanes;
  p.a.assign(p.rows * p.pairs, 0);
  p.b.assign(p.pairs * p.columns * 2, 0);
  auto at_a = [&](int64_t i, int64_t kk) -> uint32_t { return ta ? a[kk * lda + i] : a[i * lda + kk]; };
  auto at_b = [&](int64_t kk, int64_t j) { return tb ? b[j * ldb + kk] : b[kk * ldb + j]; };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk) p.a[i * p.pairs + kk / 2] |= at_a(i, kk) << (16 * (kk % 2));
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) p.b[(kk / 2 * p.columns + j) * 2 + kk % 2] = at_b(kk, j);
  return p;
}

// Rows [first, last) of C (multiples of kRows, within the padded rows), every column.
__attribute__((target("avx512f,avx512bf16"))) void dot_rows(const Packed& p, int64_t n, int64_t m,
                                                            int64_t first, int64_t last, float* c, int64_t ldc) {
  for (int64_t i = first; i < last; i += kRows) {
    const uint32_t* a = p.a.data() + i * p.pairs;
    for (int64_t j = 0; j < n; j += kLanes) {
      __m512 acc[kRows] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      for (int64_t q = 0; q < p.pairs; ++q) {
        const __m512bh bv = (__m512bh)_mm512_loadu_si512(p.b.data() + (q * p.columns + j) * 2);
        for (int64_t r = 0; r < kRows; ++r)
          acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r * p.pairs + q])), bv);
      }
      const __mmask16 mask = n - j >= kLanes ? 0xFFFF : static_cast<__mmask16>((1u << (n - j)) - 1);
      for (int64_t r = 0; r < kRows && i + r < m; ++r) _mm512_mask_storeu_ps(c + (i + r) * ldc + j, mask, acc[r]);
    }
  }
}

void dot_bf16(ThreadPool* pool, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
              int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  const Packed p = pack(ta, tb, m, n, k, a, lda, b, ldb);
  const int64_t blocks = p.rows / kRows;
  if (!pool || 2.0 * m * n * k < kSplitFlops || blocks < 2) {
    dot_rows(p, n, m, 0, p.rows, c, ldc);
    return;
  }
  pool->parallel_for(blocks, [&](int64_t first, int64_t last) { dot_rows(p, n, m, first * kRows, last * kRows, c, ldc); });
}

// The operands widened to f32 (exact), transposes resolved, then sgemm.
void widened(ThreadPool* pool, DType dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
             int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  std::vector<float> af(m * k), bf(k * n);
  auto widen = [&](uint16_t bits) { return static_cast<float>(half_value(bits, dtype)); };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk) af[i * k + kk] = widen(ta ? a[kk * lda + i] : a[i * lda + kk]);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) bf[kk * n + j] = widen(tb ? b[j * ldb + kk] : b[kk * ldb + j]);
  sgemm(pool, false, false, m, n, k, af.data(), k, bf.data(), n, 0.0f, c, ldc);
}

bool use_dot_bf16(DType dtype) { return dtype == DType::bf16 && isa_allows(CpuIsa::avx512bf16); }

}  // namespace

const char* half_gemm_path(DType dtype) { return use_dot_bf16(dtype) ? "vdpbf16ps" : "widened to f32 + sgemm"; }

void half_gemm(ThreadPool* pool, DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
               int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (use_dot_bf16(dtype)) dot_bf16(pool, transpose_a, transpose_b, m, n, k, a, lda, b, ldb, c, ldc);
  else widened(pool, dtype, transpose_a, transpose_b, m, n, k, a, lda, b, ldb, c, ldc);
}

}  // namespace towerjit::cpujit
