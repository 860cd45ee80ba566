#include "runtime/cpu/bf16_pairs.h"

#include <algorithm>
#include <cstring>

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

}  // namespace

// Each word's address advanced, never computed per element (a division per element had cost more
// than the product). k's pairs: `whole` with both halves in k, `pairs` with either (k odd: the
// last pair's second half is zero); past them, and past m and n, zeros.
void pack_bf16_pairs(const Bf16PairShape& shape, ThreadPool* pool, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, Bf16Pairs& p) {
  p.pairs = round_up((k + 1) / 2, shape.pair_multiple);
  p.rows = round_up(m, shape.row_multiple);
  p.columns = round_up(n, shape.column_multiple);
  grow(p.a, p.rows * p.pairs);
  grow(p.b, p.pairs * p.columns);
  const int64_t whole = k / 2, pairs = (k + 1) / 2;

  // A block by block, each [R][P] words in a row: row-major A's words are its own bytes (two bf16
  // neighbours, the first low, are one little-endian word), copied; a transposed A's words
  // interleave two of its rows.
  const int64_t R = shape.a_block_rows, P = shape.a_block_pairs;
  loop(pool, p.rows / R, m * pairs, [&](int64_t first, int64_t last) {
    for (int64_t i0 = first * R; i0 < last * R; i0 += R) {
      uint32_t* out = p.a.data() + i0 * p.pairs;  // the row block's blocks, one after another
      for (int64_t q0 = 0; q0 < p.pairs; q0 += P, out += R * P) {
        const int64_t cells = std::clamp<int64_t>(pairs - q0, 0, P), full = std::clamp<int64_t>(whole - q0, 0, P);
        for (int64_t r = 0; r < R; ++r) {
          uint32_t* to = out + r * P;
          const int64_t i = i0 + r, done = i < m ? cells : 0;
          if (i < m && !ta) {
            const uint16_t* from = a + i * lda + 2 * q0;
            std::memcpy(to, from, static_cast<size_t>(full) * sizeof(uint32_t));
            if (cells > full) to[full] = from[2 * full];
          } else if (i < m) {  // A stored [k, m]: its rows 2q and 2q + 1 give pair q of op(A)'s row i
            const uint16_t* from = a + 2 * q0 * lda + i;
            for (int64_t c = 0; c < cells; ++c) to[c] = pair_word(from[2 * c * lda], c < full ? from[(2 * c + 1) * lda] : 0);
          }
          std::fill(to + done, to + P, 0u);
        }
      }
    }
  });

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
