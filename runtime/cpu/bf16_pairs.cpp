#include "runtime/cpu/bf16_pairs.h"

#include <algorithm>
#include <cstring>

#include "dsl/error.h"

namespace towerjit::cpujit {
namespace {

// Below this many words packing stays on the calling thread (a pool's loop costs a few us).
constexpr int64_t kSplitWords = 1 << 16;

int64_t round_up(int64_t v, int64_t multiple) { return (v + multiple - 1) / multiple * multiple; }

// Two bf16 neighbours along k as one word, the first in the low half (as both kernels read them).
inline uint32_t pair_word(uint16_t first, uint16_t second) { return first | static_cast<uint32_t>(second) << 16; }

// body(first, last) over [0, n), split over the pool when `words` are worth it.
template <typename Body>
void loop(ThreadPool* pool, int64_t n, int64_t words, Body body) {
  if (pool && pool->size() > 1 && words >= kSplitWords && n > 1) pool->parallel_for(n, body);
  else body(0, n);
}

void grow(std::vector<uint32_t>& v, int64_t words) {
  if (static_cast<int64_t>(v.size()) < words) v.resize(words);
}

// A in blocks of R rows x P pairs (Bf16PairShape), P a constant so that a word's place within
// its row, (q / P) R P + q % P, is shifts and masks. Row-major A: a row at a time, its words
// read in order; transposed A (stored [k, m]): a pair at a time over R neighbouring rows of
// op(A), which are neighbours in both of the source rows the pair interleaves. Padding rows and
// pairs are written as zeros.
template <int64_t P>
void pack_a(Bf16Pairs& p, int64_t R, ThreadPool* pool, bool ta, int64_t m, int64_t k, const uint16_t* a,
            int64_t lda) {
  const int64_t whole = k / 2, pairs = (k + 1) / 2;
  auto at = [&](uint32_t* row, int64_t q) -> uint32_t& { return row[q / P * R * P + q % P]; };
  loop(pool, p.rows / R, m * pairs, [&](int64_t first, int64_t last) {
    for (int64_t i0 = first * R; i0 < last * R; i0 += R) {
      uint32_t* block = p.a.data() + i0 * p.pairs;  // row i0 + r's words start at block + r P
      if (!ta) {
        for (int64_t r = 0; r < R; ++r) {
          uint32_t* row = block + r * P;
          const uint16_t* from = a + (i0 + r) * lda;
          int64_t q = 0;
          if (i0 + r < m) {
            // Whole blocks are the row's own bytes (two bf16 neighbours, the first low, are one
            // little-endian word), copied P words at a time.
            for (; q + P <= whole; q += P) std::memcpy(&at(row, q), from + 2 * q, P * sizeof(uint32_t));
            for (; q < whole; ++q) at(row, q) = pair_word(from[2 * q], from[2 * q + 1]);
            if (q < pairs) at(row, q++) = from[2 * whole];
          }
          for (; q < p.pairs; ++q) at(row, q) = 0;
        }
      } else {
        const int64_t rows = std::clamp<int64_t>(m - i0, 0, R);
        for (int64_t q = 0; q < p.pairs; ++q) {
          const uint16_t* one = q < pairs ? a + 2 * q * lda + i0 : nullptr;
          const uint16_t* two = q < whole ? one + lda : nullptr;
          int64_t r = 0;
          if (two) for (; r < rows; ++r) at(block + r * P, q) = pair_word(one[r], two[r]);
          else if (one) for (; r < rows; ++r) at(block + r * P, q) = one[r];
          for (; r < R; ++r) at(block + r * P, q) = 0;
        }
      }
    }
  });
}

}  // namespace

Bf16Pairs& this_thread_pairs() {
  thread_local Bf16Pairs pairs;
  return pairs;
}

// Every word's place found by shifts, masks and pointers advanced, never by a division per
// element (one had cost more than the product). k's pairs: `whole` with both halves in k,
// `pairs` with either (k odd: the last pair's second half is zero); past them, and past m and
// n, zeros.
void pack_bf16_pairs(const Bf16PairShape& shape, ThreadPool* pool, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, Bf16Pairs& p) {
  p.pairs = round_up((k + 1) / 2, shape.pair_multiple);
  p.rows = round_up(m, shape.row_multiple);
  p.columns = round_up(n, shape.column_multiple);
  grow(p.a, p.rows * p.pairs);
  grow(p.b, p.pairs * p.columns);
  const int64_t whole = k / 2, pairs = (k + 1) / 2;

  if (shape.a_block_pairs == 1) pack_a<1>(p, shape.a_block_rows, pool, ta, m, k, a, lda);
  else if (shape.a_block_pairs == 16) pack_a<16>(p, shape.a_block_rows, pool, ta, m, k, a, lda);
  else internal_check(false) << "bf16 pairs packed in blocks of " << shape.a_block_pairs << " pairs";

  // B panel by panel, each [pair][16 columns]: a row-major B's pair of rows interleaved 16 columns
  // at a time; a transposed B's rows are its columns, whose words are again its own bytes.
  const int64_t panels = p.columns / kPanelColumns;
  auto panel = [&](int64_t j0) { return p.b.data() + j0 / kPanelColumns * p.pairs * kPanelColumns; };
  if (!tb) {
    loop(pool, p.pairs, n * pairs, [&](int64_t first, int64_t last) {
      for (int64_t q = first; q < last; ++q) {
        const uint16_t* one = q < pairs ? b + 2 * q * ldb : nullptr;
        const uint16_t* two = q < whole ? one + ldb : nullptr;
        for (int64_t j0 = 0; j0 < p.columns; j0 += kPanelColumns) {
          uint32_t* to = panel(j0) + q * kPanelColumns;
          const int64_t lanes = one ? std::clamp<int64_t>(n - j0, 0, kPanelColumns) : 0;
          for (int64_t l = 0; l < lanes; ++l) to[l] = pair_word(one[j0 + l], two ? two[j0 + l] : 0);
          std::fill(to + lanes, to + kPanelColumns, 0u);
        }
      }
    });
  } else {
    loop(pool, panels, n * pairs, [&](int64_t first, int64_t last) {
      for (int64_t j0 = first * kPanelColumns; j0 < last * kPanelColumns; j0 += kPanelColumns) {
        uint32_t* to = panel(j0);
        const int64_t lanes = std::clamp<int64_t>(n - j0, 0, kPanelColumns);
        for (int64_t q = 0; q < p.pairs; ++q, to += kPanelColumns) {
          for (int64_t l = 0; l < lanes; ++l) {
            const uint16_t* row = b + (j0 + l) * ldb;
            to[l] = q < whole ? pair_word(row[2 * q], row[2 * q + 1]) : q < pairs ? row[2 * q] : 0u;
          }
          std::fill(to + lanes, to + kPanelColumns, 0u);
        }
      }
    });
  }
}

}  // namespace towerjit::cpujit
