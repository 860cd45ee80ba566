#include "runtime/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "jit/kir/attention_geometry.h"
#include "runtime/cpu/conv.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/lane_sum.h"
#include "runtime/cpu/transpose.h"
#include "runtime/cpu/vector_exp.h"

// Every product is a sum of axpys over contiguous rows (a tile of scores against a transposed
// tile of keys, an output row against value rows), 8 lanes of columns at a time, each element's
// terms added in order; dot products never run across vector lanes. Each routine is compiled
// twice, for the build's target and for AVX2 + FMA, and the second runs where the CPU has it.
// The exponentials of a row are taken on whole vectors of its own (vector_exp_in_place) before
// the row's sums and axpys use them; a row's maximum and sum run in 8 lanes (lane_sum.h),
// combined in a fixed order.
#define TJ_INLINE inline __attribute__((always_inline))

namespace towerjit::cpujit {
namespace {

constexpr int64_t kQueryBlock = 32;  // rows of queries per task (forward, dq)
constexpr int64_t kKeyBlock = 64;    // keys per tile (forward, dq); rows of keys per task (dk, dv)
constexpr int64_t kQueryTile = 64;   // queries per tile (dk, dv)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Operands {
  kir::AttentionGeometry g;
  float scale;
  const float *q, *k, *v, *o, *dout;  // o, dout: the packed [tq, dv + 1] rows (backward only)
  float* out;
  bool avx2;  // the level allows AVX2 (asked once: it reads the environment)
  const float* qb(int64_t b) const { return q + b * g.tq * g.d; }
  const float* kb(int64_t b) const { return k + b * g.tk * g.d; }
  const float* vb(int64_t b) const { return v + b * g.tk * g.dv; }
};

// t[c * ld + r] = x[r * cols + c] for r < rows: a tile laid out so a row of it runs along r.
// Where the CPU has AVX2, through transpose_floats' 8x8 tiles (one float at a time, a tile's
// transpose took about as long as its products at a head dimension of 16).
TJ_INLINE void transpose_tile(bool avx2, const float* x, int64_t rows, int64_t cols, float* t, int64_t ld) {
  if (avx2) return transpose_floats(x, rows, cols, cols, t, ld);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * ld + r] = x[r * cols + c];
}

// Tiles are computed a group of up to kGroupRows rows at a time, 16 columns at a time: 12
// accumulators of 8 lanes, so each vector of the other operand loaded feeds 6 rows' FMAs and
// 12 independent sums keep both FMA pipes busy. One row at a time, a 16-wide row held 2 sums,
// each waiting on the FMA before it: gpt-small's head dimension of 16 ran its three routines at
// 15-30 GFLOP/s on a Zen 4 core. Every element is still summed in order, one FMA a term, so a
// value is the same bits whichever group or row width computed it.
constexpr int64_t kTile = 64;
constexpr int kGroupRows = 6;
using Floats8 = float __attribute__((vector_size(32), aligned(4), may_alias));  // 8 lanes, any address
#define TJ_UNROLL _Pragma("GCC unroll 16")
// x in every lane, one vbroadcastss (Floats8{} + x costs an add of zero and a register for it).
#define TJ_BROADCAST8(x) (Floats8{(x), (x), (x), (x), (x), (x), (x), (x)})

// A row's length rounded up to whole vectors: elementwise passes over a row of a tile run to it
// (within the tile's kTile columns), so that no row ends in scalar iterations; what they compute
// past the row's end is never read.
TJ_INLINE int64_t whole_vectors(int64_t n) { return (n + 7) / 8 * 8; }

// acc[r * ld_acc + 0..16) = (or, `from_zero` false, +=) sum_{t0 <= t < t1} w[r * ldw + t] *
// m[t * ldm + 0..16) for r < R, t in order: both the products of a tile (w a row of queries or
// keys, m the other side's transposed tile) and the sums of rows weighted by P or dS.
template <int R>
struct RowBlock {
  static TJ_INLINE void run(const float* w, int64_t ldw, int64_t t0, int64_t t1, const float* m, int64_t ldm,
                            float* acc, int64_t ld_acc, bool from_zero) {
    Floats8 a[2 * R];
    auto at = [&](int v) { return reinterpret_cast<Floats8*>(acc + (v / 2) * ld_acc + (v % 2) * 8); };
    TJ_UNROLL for (int v = 0; v < 2 * R; ++v) a[v] = from_zero ? Floats8{} : *at(v);
    for (int64_t t = t0; t < t1; ++t) {
      const auto* mt = reinterpret_cast<const Floats8*>(m + t * ldm);
      const Floats8 b0 = mt[0], b1 = mt[1];
      TJ_UNROLL for (int r = 0; r < R; ++r) {
        const Floats8 x = TJ_BROADCAST8(w[r * ldw + t]);
        a[2 * r] += x * b0;
        a[2 * r + 1] += x * b1;
      }
    }
    TJ_UNROLL for (int v = 0; v < 2 * R; ++v) *at(v) = a[v];
  }
};

// A group's rows by their count, as one call.
template <template <int> class Kernel, typename... Args>
TJ_INLINE void by_rows(int64_t rows, Args... args) {
  switch (rows) {
    case 1: return Kernel<1>::run(args...);
    case 2: return Kernel<2>::run(args...);
    case 3: return Kernel<3>::run(args...);
    case 4: return Kernel<4>::run(args...);
    case 5: return Kernel<5>::run(args...);
    default: return Kernel<6>::run(args...);
  }
}

// s[i * kTile + j] = sum_c a[i * cols + c] * bt[c * kTile + j] for i < rows and j in the
// columns [from, to) = span(i) that row i reads: under a causal mask, the keys a query sees (or
// the queries that see a key), about half of the tile. A group computes the union of its rows'
// spans, widened to whole blocks of 16 columns; the extra columns compute on whatever the tile
// holds there and are never read, nor are the columns outside them.
template <typename Span>
TJ_INLINE void products(const float* a, int64_t rows, int64_t cols, const float* bt, Span span, float* s) {
  for (int64_t i = 0; i < rows; i += kGroupRows) {
    const int64_t group = std::min<int64_t>(kGroupRows, rows - i);
    int64_t from = kTile, to = 0;
    for (int64_t r = i; r < i + group; ++r) {
      const auto [f, t] = span(r);
      if (f < t) from = std::min(from, f), to = std::max(to, t);
    }
    for (int64_t j = from / 16 * 16; j < to; j += 16)  // to <= kTile, so j + 16 <= kTile
      by_rows<RowBlock>(group, a + i * cols, cols, int64_t{0}, cols, bt + j, kTile, s + i * kTile + j, kTile, true);
  }
}

// The keys of the tile [j0, j0 + n) that query row r of a block from i0 sees, as products'
// span and add_weighted_rows' range: [0, count), empty when it sees none of them.
TJ_INLINE auto keys_seen_in_tile(const kir::AttentionGeometry& g, int64_t i0, int64_t j0, int64_t n) {
  return [&g, i0, j0, n](int64_t r) {
    return std::pair<int64_t, int64_t>(0, std::clamp<int64_t>(g.keys(i0 + r) - j0, 0, n));
  };
}

// out[r * ldo + c] += sum_{t in range(r)} w[r * ldw + t] * m[t * width + c] for r < rows, c <
// width: each row's terms in order of t, summed from 0 and then added to out once (a row whose
// range is empty is left alone). 16 columns at a time for a group of rows: the terms all its
// rows have (ranges under a causal mask differ by a row's first or last terms) as one block,
// each row's own terms before and after them one row at a time, in their place in the order.
template <typename Range>
TJ_INLINE void add_weighted_rows(const float* w, int64_t ldw, int64_t rows, Range range, const float* m,
                                 int64_t width, float* out, int64_t ldo) {
  alignas(32) float acc[kGroupRows * 16];
  for (int64_t i = 0; i < rows; i += kGroupRows) {
    const int64_t group = std::min<int64_t>(kGroupRows, rows - i);
    int64_t shared_from = 0, shared_to = std::numeric_limits<int64_t>::max();
    for (int64_t r = i; r < i + group; ++r) {
      const auto [t0, t1] = range(r);
      shared_from = std::max(shared_from, t0), shared_to = std::min(shared_to, t1);
    }
    const float* wi = w + i * ldw;
    int64_t c0 = 0;
    for (; c0 + 16 <= width; c0 += 16) {
      std::fill(acc, acc + group * 16, 0.0f);
      for (int64_t r = 0; r < group; ++r) {
        const auto [t0, t1] = range(i + r);
        const int64_t head_end = shared_from < shared_to ? std::min(t1, shared_from) : t1;
        RowBlock<1>::run(wi + r * ldw, ldw, t0, head_end, m + c0, width, acc + r * 16, 16, false);
      }
      if (shared_from < shared_to) {
        by_rows<RowBlock>(group, wi, ldw, shared_from, shared_to, m + c0, width, acc, int64_t{16}, false);
        for (int64_t r = 0; r < group; ++r)
          RowBlock<1>::run(wi + r * ldw, ldw, shared_to, range(i + r).second, m + c0, width, acc + r * 16, 16, false);
      }
      for (int64_t r = 0; r < group; ++r) {
        const auto [t0, t1] = range(i + r);
        if (t0 >= t1) continue;
        float* o = out + (i + r) * ldo + c0;
        for (int64_t c = 0; c < 16; ++c) o[c] += acc[r * 16 + c];
      }
    }
    for (; c0 < width; ++c0)
      for (int64_t r = i; r < i + group; ++r) {
        const auto [t0, t1] = range(r);
        if (t0 >= t1) continue;
        float sum = 0;
        for (int64_t t = t0; t < t1; ++t) sum += w[r * ldw + t] * m[t * width + c0];
        out[r * ldo + c0] += sum;
      }
  }
}

// The largest of init and x[0 .. n), 8 lanes at a time: max is exact, so only the sign of a
// zero may differ from a row's scalar fold (a NaN in x is passed over as std::max does).
TJ_INLINE float row_max(const float* x, int64_t n, float init) {
  Floats8 top = TJ_BROADCAST8(init);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const Floats8 v = *reinterpret_cast<const Floats8*>(x + j);
    top = top < v ? v : top;
  }
  float out = init;
  for (int lane = 0; lane < 8; ++lane) out = std::max(out, top[lane]);
  for (; j < n; ++j) out = std::max(out, x[j]);
  return out;
}

// Rows [i0, i1) of problem b: running maximum m and sum l per row, the output accumulated in
// acc and rescaled whenever a tile raises the maximum; then out = acc / l and lse = m + log l.
TJ_INLINE void forward_block(const Operands& x, int64_t b, int64_t i0, int64_t i1, float* kt, float* s, float* acc,
                             float* m, float* l) {
  const auto& g = x.g;
  const int64_t rows = i1 - i0;
  const float* q = x.qb(b) + i0 * g.d;
  std::fill(acc, acc + rows * g.dv, 0.0f);
  std::fill(m, m + rows, kNegInf);
  std::fill(l, l + rows, 0.0f);
  const int64_t keys = g.keys(i1 - 1);
  for (int64_t j0 = 0; j0 < keys; j0 += kKeyBlock) {
    const int64_t n = std::min(kKeyBlock, keys - j0);
    const auto keys_seen = keys_seen_in_tile(g, i0, j0, n);
    transpose_tile(x.avx2, x.kb(b) + j0 * g.d, n, g.d, kt, kKeyBlock);
    products(q, rows, g.d, kt, keys_seen, s);
    for (int64_t r = 0; r < rows; ++r) {
      float* __restrict sr = s + r * kKeyBlock;
      const int64_t seen = keys_seen(r).second;
      if (seen <= 0) continue;
      for (int64_t j = 0; j < whole_vectors(seen); ++j) sr[j] *= x.scale;
      const float top = row_max(sr, seen, m[r]);
      const float rescale = vector_exp(m[r] - top);  // 0 on the first tile (m = -inf)
      for (int64_t j = 0; j < whole_vectors(seen); ++j) sr[j] -= top;
      vector_exp_in_place(sr, whole_vectors(seen));
      l[r] = l[r] * rescale + lane_sum(seen, [&](int64_t j) { return sr[j]; });
      m[r] = top;
      float* __restrict ar = acc + r * g.dv;
      if (rescale != 1.0f)
        for (int64_t c = 0; c < g.dv; ++c) ar[c] *= rescale;
    }
    add_weighted_rows(s, kKeyBlock, rows, keys_seen, x.vb(b) + j0 * g.dv, g.dv, acc, g.dv);
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict o = x.out + (b * g.tq + i0 + r) * (g.dv + 1);
    const float inv = 1.0f / l[r];
    for (int64_t c = 0; c < g.dv; ++c) o[c] = acc[r * g.dv + c] * inv;
    o[g.dv] = m[r] + std::log(l[r]);
  }
}

// D_i = dO_i . O_i for rows [i0, i0 + rows), and their log-sum-exps, from the packed rows.
TJ_INLINE void row_stats(const Operands& x, int64_t b, int64_t i0, int64_t rows, float* D, float* lse) {
  const auto& g = x.g;
  for (int64_t r = 0; r < rows; ++r) {
    const float* o = x.o + (b * g.tq + i0 + r) * (g.dv + 1);
    const float* dout = x.dout + (b * g.tq + i0 + r) * (g.dv + 1);
    float sum = 0;
    for (int64_t c = 0; c < g.dv; ++c) sum += dout[c] * o[c];
    D[r] = sum, lse[r] = o[g.dv];
  }
}

// The packed d out rows [i0, i0 + rows) without their last column, contiguous: [rows, dv].
TJ_INLINE void gather_dout(const Operands& x, int64_t b, int64_t i0, int64_t rows, float* to) {
  const auto& g = x.g;
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(x.dout + (b * g.tq + i0 + r) * (g.dv + 1), g.dv, to + r * g.dv);
}

// dq for query rows [i0, i1): per key tile, P = exp(scale S - lse), dP = dO V^T,
// dS = P (dP - D), dq += scale dS K.
TJ_INLINE void grad_q_block(const Operands& x, int64_t b, int64_t i0, int64_t i1, float* kt, float* vt, float* s,
                            float* dp, float* dout, float* D, float* lse) {
  const auto& g = x.g;
  const int64_t rows = i1 - i0;
  const float* q = x.qb(b) + i0 * g.d;
  float* dq = x.out + (b * g.tq + i0) * g.d;
  std::fill(dq, dq + rows * g.d, 0.0f);
  row_stats(x, b, i0, rows, D, lse);
  gather_dout(x, b, i0, rows, dout);
  const int64_t keys = g.keys(i1 - 1);
  for (int64_t j0 = 0; j0 < keys; j0 += kKeyBlock) {
    const int64_t n = std::min(kKeyBlock, keys - j0);
    const auto keys_seen = keys_seen_in_tile(g, i0, j0, n);
    transpose_tile(x.avx2, x.kb(b) + j0 * g.d, n, g.d, kt, kKeyBlock);
    transpose_tile(x.avx2, x.vb(b) + j0 * g.dv, n, g.dv, vt, kKeyBlock);
    products(q, rows, g.d, kt, keys_seen, s);
    products(dout, rows, g.dv, vt, keys_seen, dp);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t seen = keys_seen(r).second;
      float* __restrict sr = s + r * kKeyBlock;
      float* __restrict dpr = dp + r * kKeyBlock;
      for (int64_t j = 0; j < whole_vectors(seen); ++j) sr[j] = sr[j] * x.scale - lse[r];
      vector_exp_in_place(sr, whole_vectors(seen));                                            // P
      for (int64_t j = 0; j < whole_vectors(seen); ++j) dpr[j] = sr[j] * (dpr[j] - D[r]) * x.scale;    // dS
    }
    add_weighted_rows(dp, kKeyBlock, rows, keys_seen, x.kb(b) + j0 * g.d, g.d, dq, g.d);
  }
}

// dk and dv for key rows [j0, j1): per tile of the queries that see them, P^T and dP^T by key
// row, dv += P^T dO, dk += scale dS^T Q.
TJ_INLINE void grad_kv_block(const Operands& x, int64_t b, int64_t j0, int64_t j1, float* qt, float* dot, float* s,
                             float* dp, float* dout, float* D, float* lse) {
  const auto& g = x.g;
  const int64_t rows = j1 - j0, w = g.d + g.dv;
  float* out = x.out + (b * g.tk + j0) * w;
  std::fill(out, out + rows * w, 0.0f);
  const int64_t first = g.causal ? j0 : 0;  // queries before j0 see none of these keys
  for (int64_t i0 = first; i0 < g.tq; i0 += kQueryTile) {
    const int64_t n = std::min(kQueryTile, g.tq - i0);
    row_stats(x, b, i0, n, D, lse);
    gather_dout(x, b, i0, n, dout);
    // The queries of this tile that see key row r: queries before key j do not see it (causal).
    auto seeing = [&](int64_t r) { return std::pair<int64_t, int64_t>(g.causal ? std::max<int64_t>(0, j0 + r - i0) : 0, n); };
    transpose_tile(x.avx2, x.qb(b) + i0 * g.d, n, g.d, qt, kQueryTile);
    transpose_tile(x.avx2, dout, n, g.dv, dot, kQueryTile);
    products(x.kb(b) + j0 * g.d, rows, g.d, qt, seeing, s);
    products(x.vb(b) + j0 * g.dv, rows, g.dv, dot, seeing, dp);
    for (int64_t r = 0; r < rows; ++r) {
      float* __restrict sr = s + r * kQueryTile;
      float* __restrict dpr = dp + r * kQueryTile;
      const int64_t from = std::min(seeing(r).first, n) / 8 * 8, to = whole_vectors(n);
      for (int64_t t = from; t < to; ++t) sr[t] = sr[t] * x.scale - lse[t];
      vector_exp_in_place(sr + from, to - from);                                 // P^T
      for (int64_t t = from; t < to; ++t) dpr[t] = sr[t] * (dpr[t] - D[t]) * x.scale;    // dS^T
    }
    add_weighted_rows(dp, kQueryTile, rows, seeing, x.qb(b) + i0 * g.d, g.d, out, w);      // dk
    add_weighted_rows(s, kQueryTile, rows, seeing, dout, g.dv, out + g.d, w);              // dv
  }
}

enum class Pass { forward, grad_q, grad_kv };

// One task: block `item` of the pass, with its scratch tiles.
TJ_INLINE void run_items(const Operands& x, Pass pass, int64_t begin, int64_t end) {
  const auto& g = x.g;
  const int64_t width = std::max({g.d, g.dv, int64_t{1}});
  std::vector<float> t1(width * kQueryTile), t2(width * kQueryTile), s(kQueryTile * kQueryTile),
      dp(kQueryTile * kQueryTile), rows(kQueryTile * width), D(kQueryTile), lse(kQueryTile);
  const int64_t block = pass == Pass::grad_kv ? kKeyBlock : kQueryBlock;
  const int64_t length = pass == Pass::grad_kv ? g.tk : g.tq;
  const int64_t blocks = (length + block - 1) / block;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t b = item / blocks, lo = (item % blocks) * block, hi = std::min(length, lo + block);
    switch (pass) {
      case Pass::forward: forward_block(x, b, lo, hi, t1.data(), s.data(), rows.data(), D.data(), lse.data()); break;
      case Pass::grad_q: grad_q_block(x, b, lo, hi, t1.data(), t2.data(), s.data(), dp.data(), rows.data(), D.data(), lse.data()); break;
      case Pass::grad_kv: grad_kv_block(x, b, lo, hi, t1.data(), t2.data(), s.data(), dp.data(), rows.data(), D.data(), lse.data()); break;
    }
  }
}

void run_items_generic(const Operands& x, Pass pass, int64_t begin, int64_t end) { run_items(x, pass, begin, end); }
TOWERJIT_TARGET_AVX2 void run_items_avx2(const Operands& x, Pass pass, int64_t begin, int64_t end) {
  run_items(x, pass, begin, end);
}

void run(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool, Pass pass) {
  static_assert(kKeyBlock == kTile && kQueryTile == kTile && kQueryBlock <= kTile, "scratch tiles are kTile wide");
  Operands x{kir::attention_geometry(in[0].shape, in[2].shape, at.causal), static_cast<float>(at.value),
             in[0].f(), in[1].f(), in[2].f(), in.size() > 3 ? in[3].f() : nullptr,
             in.size() > 4 ? in[4].f() : nullptr, out.f(), isa_allows(CpuIsa::avx2)};
  const int64_t block = pass == Pass::grad_kv ? kKeyBlock : kQueryBlock;
  const int64_t length = pass == Pass::grad_kv ? x.g.tk : x.g.tq;
  const int64_t items = x.g.batches * ((length + block - 1) / block);
  parallel(pool, items, [&](int64_t begin, int64_t end) {
    if (x.avx2) run_items_avx2(x, pass, begin, end);
    else run_items_generic(x, pass, begin, end);
  });
}

}  // namespace

void attention(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool) {
  run(at, in, out, pool, Pass::forward);
}
void attention_grad_q(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool) {
  run(at, in, out, pool, Pass::grad_q);
}
void attention_grad_kv(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool) {
  run(at, in, out, pool, Pass::grad_kv);
}

}  // namespace towerjit::cpujit
