#include "runtime/cpu/amx_gemm.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

#include "runtime/cpu/bf16_pairs.h"

namespace towerjit::cpujit {
namespace {

// A tile is 16 rows of 64 bytes: A's tile 16 rows x 16 pairs (32 k), B's 16 pairs x 16 columns
// (each row the 16 columns' pairs: the panels of bf16_pairs.h), C's 16 rows x 16 f32.
constexpr int64_t kTile = 16;
constexpr int64_t kTileBytes = 64;
// The 8 tile registers as a 2 x 2 block of C (tiles 0-3) fed by two tiles of A (4, 5) and two of B
// (6, 7): each pair of loads feeds two tdpbf16ps. So C goes 32 x 32 at a time.
constexpr int64_t kBlock = 2 * kTile;
// A in tiles, each 1 KiB in a row, a row block's tiles one after another (as B's panels are), so
// every tile load reads 1 KiB the prefetcher has seen coming (A row-major, its tiles' rows 1.6 KiB
// apart, ran at 600 GFLOP/s); rows padded to the block, pairs to a tile's 16, columns to two
// panels. Padding is zeros: it adds nothing to a sum and is never stored.
constexpr Bf16PairShape kShape{kTile, kTile, kBlock, kTile, kBlock};
static_assert(kTile == kPanelColumns);

// Below this many flops a product runs on the calling thread (as gemm.cpp's kSplitFlops, scaled
// by AMX's rate: about 16x vdpbf16ps's).
constexpr double kSplitFlops = 32e6;

// The tile configuration (palette 1): every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Stores a C tile at rows i.., columns j.. of C: straight from the tile where all 16 x 16 lie
// inside C, else through a buffer, the inside part copied. `store(to, stride)` stores the tile
// (the tile intrinsics take the tile's number as a literal, pasted into the instruction).
template <typename StoreTile>
inline void store_tile(StoreTile store, float* c, int64_t ldc, int64_t m, int64_t n, int64_t i, int64_t j) {
  if (i >= m || j >= n) return;
  if (i + kTile <= m && j + kTile <= n) return store(c + i * ldc + j, ldc * static_cast<int64_t>(sizeof(float)));
  alignas(64) float spill[kTile * kTile];
  store(spill, kTileBytes);
  const int64_t rows = std::min(kTile, m - i), columns = std::min(kTile, n - j);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(spill + r * kTile, columns, c + (i + r) * ldc + j);
}

// Blocks [first, last) of C's 32 x 32 blocks, numbered column block by column block (so a chunk
// walks down a strip of B, which stays in cache, over A's rows). Each block sums the whole of k
// in its tiles, one tdpbf16ps after another: one f32 sum per element in a fixed order, the
// same bits whichever thread runs it. tdpbf16ps rounds each addition to nearest even and
// flushes subnormals, as vdpbf16ps does.
__attribute__((target("amx-tile,amx-bf16"))) void tile_blocks(const Bf16Pairs& p, int64_t m, int64_t n,
                                                             int64_t first, int64_t last, float* c, int64_t ldc) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = kTileBytes;
    config.rows[t] = kTile;
  }
  _tile_loadconfig(&config);  // per thread: the tiles are a thread's state
  const int64_t row_blocks = p.rows / kBlock;
  for (int64_t block = first; block < last; ++block) {
    const int64_t i = block % row_blocks * kBlock, j = block / row_blocks * kBlock;
    const uint32_t* a0 = p.a_rows(i);
    const uint32_t* a1 = p.a_rows(i + kTile);
    const uint32_t* b0 = p.panel(j);
    const uint32_t* b1 = p.panel(j + kTile);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t q = 0; q < p.pairs; q += kTile) {
      _tile_loadd(4, a0 + q * kTile, kTileBytes);
      _tile_loadd(5, a1 + q * kTile, kTileBytes);
      _tile_loadd(6, b0 + q * kPanelColumns, kTileBytes);
      _tile_loadd(7, b1 + q * kPanelColumns, kTileBytes);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    store_tile([](float* to, int64_t stride) { _tile_stored(0, to, stride); }, c, ldc, m, n, i, j);
    store_tile([](float* to, int64_t stride) { _tile_stored(1, to, stride); }, c, ldc, m, n, i, j + kTile);
    store_tile([](float* to, int64_t stride) { _tile_stored(2, to, stride); }, c, ldc, m, n, i + kTile, j);
    store_tile([](float* to, int64_t stride) { _tile_stored(3, to, stride); }, c, ldc, m, n, i + kTile, j + kTile);
  }
  _tile_release();  // a thread holding no tiles saves no tile state when it is switched out
}

}  // namespace

bool amx_tiles_granted() {
  static const bool granted = [] {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
}

void amx_bf16_gemm(ThreadPool* pool, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                   int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  Bf16Pairs& p = this_thread_pairs();
  pack_bf16_pairs(kShape, pool, ta, tb, m, n, k, a, lda, b, ldb, p);
  const int64_t blocks = p.rows / kBlock * (p.columns / kBlock);
  if (!pool || pool->size() < 2 || 2.0 * m * n * k < kSplitFlops || blocks < 2) {
    tile_blocks(p, m, n, 0, blocks, c, ldc);
    return;
  }
  pool->parallel_for(blocks, [&](int64_t first, int64_t last) { tile_blocks(p, m, n, first, last, c, ldc); });
}

}  // namespace towerjit::cpujit
