#include "runtime/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "jit/kir/attention_geometry.h"
#include "runtime/cpu/conv.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/vector_exp.h"

// Every inner loop is an axpy over a contiguous row (a tile of scores against a transposed
// tile of keys, an output row against a value row), which the compiler vectorises without
// reordering any sum; dot products never run across vector lanes. Each routine is compiled
// twice, for the build's target and for AVX2 + FMA, and the second runs where the CPU has it.
// The exponentials of a row are taken in a loop of their own (vector_exp, which vectorises)
// before the row's sums and axpys use them.
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
  const float* qb(int64_t b) const { return q + b * g.tq * g.d; }
  const float* kb(int64_t b) const { return k + b * g.tk * g.d; }
  const float* vb(int64_t b) const { return v + b * g.tk * g.dv; }
};

// t[c * ld + r] = x[r * cols + c] for r < rows: a tile laid out so a row of it runs along r.
TJ_INLINE void transpose_tile(const float* x, int64_t rows, int64_t cols, float* t, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * ld + r] = x[r * cols + c];
}

// One row of a tile of products: s_row[j] = sum_c a_row[c] * bt[c * kTile + j] for j < N, c in
// order. The row's N sums are vectors of 8 held in registers across the whole sum (N / 8 of
// them; N a multiple of 16), written out once at the end: as plain float arrays, the compiler
// kept them in memory in some of the widths and the routines ran 1.5x slower.
constexpr int64_t kTile = 64;
using Floats8 = float __attribute__((vector_size(32), aligned(4), may_alias));  // 8 lanes, any address
template <int64_t N>
TJ_INLINE void product_row(const float* a_row, int64_t cols, const float* bt, float* s_row) {
  constexpr int64_t kVectors = N / 8;
  Floats8 acc[kVectors] = {};
  for (int64_t c = 0; c < cols; ++c) {
    const Floats8 a_c = Floats8{} + a_row[c];  // broadcast
    const auto* bc = reinterpret_cast<const Floats8*>(bt + c * kTile);
    for (int64_t v = 0; v < kVectors; ++v) acc[v] += a_c * bc[v];
  }
  auto* out = reinterpret_cast<Floats8*>(s_row);
  for (int64_t v = 0; v < kVectors; ++v) out[v] = acc[v];
}

// s[i * kTile + j] = sum_c a[i * cols + c] * bt[c * kTile + j] for i < rows and j in the
// columns [from, to) = span(i) that row i reads: under a causal mask, the keys a query sees (or
// the queries that see a key), about half of the tile. The span is widened to whole blocks of
// 16 columns; the extra columns compute on whatever the tile holds there and are never read,
// nor are the columns outside it. Every sum runs in the same order whatever the span, so a
// value is the same bits however wide its row was computed.
template <typename Span>
TJ_INLINE void products(const float* a, int64_t rows, int64_t cols, const float* bt, Span span, float* s) {
  for (int64_t i = 0; i < rows; ++i) {
    const auto [from, to] = span(i);
    if (from >= to) continue;
    const int64_t j0 = from / 16 * 16;  // to <= kTile, so j0 + the widened span <= kTile
    const float* ai = a + i * cols;
    float* si = s + i * kTile + j0;
    switch ((to - j0 + 15) / 16) {
      case 1: product_row<16>(ai, cols, bt + j0, si); break;
      case 2: product_row<32>(ai, cols, bt + j0, si); break;
      case 3: product_row<48>(ai, cols, bt + j0, si); break;
      default: product_row<64>(ai, cols, bt + j0, si); break;
    }
  }
}

// The keys of the tile [j0, j0 + n) that query row r of a block from i0 sees, as products'
// span: [0, count), empty when it sees none of them.
TJ_INLINE auto keys_seen_in_tile(const kir::AttentionGeometry& g, int64_t i0, int64_t j0, int64_t n) {
  return [&g, i0, j0, n](int64_t r) { return std::pair<int64_t, int64_t>(0, std::min(n, g.keys(i0 + r) - j0)); };
}

// out[c] += sum_{t < count} w[t] * m[t * width + c] for c < width, t in order: 16 columns at a
// time summed in a local array the compiler keeps in registers, then added to out once (an
// axpy per t loaded and stored out at every t).
constexpr int64_t kColumns = 16;
TJ_INLINE void add_weighted_rows(const float* w, int64_t count, const float* m, int64_t width, float* out) {
  int64_t c0 = 0;
  for (; c0 + kColumns <= width; c0 += kColumns) {
    float acc[kColumns] = {};
    for (int64_t t = 0; t < count; ++t) {
      const float wt = w[t];
      const float* __restrict mt = m + t * width + c0;
      for (int64_t c = 0; c < kColumns; ++c) acc[c] += wt * mt[c];
    }
    for (int64_t c = 0; c < kColumns; ++c) out[c0 + c] += acc[c];
  }
  for (; c0 < width; ++c0) {
    float acc = 0;
    for (int64_t t = 0; t < count; ++t) acc += w[t] * m[t * width + c0];
    out[c0] += acc;
  }
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
    transpose_tile(x.kb(b) + j0 * g.d, n, g.d, kt, kKeyBlock);
    products(q, rows, g.d, kt, keys_seen, s);
    for (int64_t r = 0; r < rows; ++r) {
      float* __restrict sr = s + r * kKeyBlock;
      const int64_t seen = keys_seen(r).second;
      if (seen <= 0) continue;
      float top = m[r];
      for (int64_t j = 0; j < seen; ++j) top = std::max(top, sr[j] *= x.scale);
      const float rescale = vector_exp(m[r] - top);  // 0 on the first tile (m = -inf)
      for (int64_t j = 0; j < seen; ++j) sr[j] = vector_exp(sr[j] - top);
      float sum = 0;
      for (int64_t j = 0; j < seen; ++j) sum += sr[j];
      l[r] = l[r] * rescale + sum;
      m[r] = top;
      float* __restrict ar = acc + r * g.dv;
      if (rescale != 1.0f)
        for (int64_t c = 0; c < g.dv; ++c) ar[c] *= rescale;
      add_weighted_rows(sr, seen, x.vb(b) + j0 * g.dv, g.dv, ar);
    }
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
    transpose_tile(x.kb(b) + j0 * g.d, n, g.d, kt, kKeyBlock);
    transpose_tile(x.vb(b) + j0 * g.dv, n, g.dv, vt, kKeyBlock);
    products(q, rows, g.d, kt, keys_seen, s);
    products(dout, rows, g.dv, vt, keys_seen, dp);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t seen = keys_seen(r).second;
      float* __restrict sr = s + r * kKeyBlock;
      float* __restrict dpr = dp + r * kKeyBlock;
      for (int64_t j = 0; j < seen; ++j) sr[j] = vector_exp(sr[j] * x.scale - lse[r]);  // P
      for (int64_t j = 0; j < seen; ++j) dpr[j] = sr[j] * (dpr[j] - D[r]) * x.scale;    // dS
      add_weighted_rows(dpr, seen, x.kb(b) + j0 * g.d, g.d, dq + r * g.d);
    }
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
    transpose_tile(x.qb(b) + i0 * g.d, n, g.d, qt, kQueryTile);
    transpose_tile(dout, n, g.dv, dot, kQueryTile);
    products(x.kb(b) + j0 * g.d, rows, g.d, qt, seeing, s);
    products(x.vb(b) + j0 * g.dv, rows, g.dv, dot, seeing, dp);
    for (int64_t r = 0; r < rows; ++r) {
      float* __restrict sr = s + r * kQueryTile;
      float* __restrict dpr = dp + r * kQueryTile;
      float* __restrict dk = out + r * w;
      const int64_t t0 = seeing(r).first;
      if (t0 >= n) continue;
      for (int64_t t = t0; t < n; ++t) sr[t] = vector_exp(sr[t] * x.scale - lse[t]);  // P^T
      for (int64_t t = t0; t < n; ++t) dpr[t] = sr[t] * (dpr[t] - D[t]) * x.scale;    // dS^T
      add_weighted_rows(dpr + t0, n - t0, x.qb(b) + (i0 + t0) * g.d, g.d, dk);
      add_weighted_rows(sr + t0, n - t0, dout + t0 * g.dv, g.dv, dk + g.d);
    }
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
             in.size() > 4 ? in[4].f() : nullptr, out.f()};
  const int64_t block = pass == Pass::grad_kv ? kKeyBlock : kQueryBlock;
  const int64_t length = pass == Pass::grad_kv ? x.g.tk : x.g.tq;
  const int64_t items = x.g.batches * ((length + block - 1) / block);
  const bool avx2 = isa_allows(CpuIsa::avx2);  // asked once: it reads the environment
  parallel(pool, items, [&](int64_t begin, int64_t end) {
    if (avx2) run_items_avx2(x, pass, begin, end);
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
