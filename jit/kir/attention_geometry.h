// The shape of a fused Attention call (ops.def) as every backend runs it: `batches` independent
// problems (the product of the leading axes, equal for q, k and v), each q [tq, d], k [tk, d],
// v [tk, dv], row-major and contiguous; the packed output [tq, dv + 1] holds each query's
// output row then its log-sum-exp. Query i sees keys [0, keys(i)).
#pragma once

#include <algorithm>
#include <cstdint>

#include "dsl/shape.h"

namespace towerjit::kir {

struct AttentionGeometry {
  int64_t batches = 1, tq = 0, tk = 0, d = 0, dv = 0;
  bool causal = false;
  // The keys query i attends to: all of them, or 0..i when causal (top-left aligned).
  int64_t keys(int64_t i) const { return causal ? std::min(tk, i + 1) : tk; }
};

// `q` and `v`: the bound (concrete) shapes of the call's first and third operands.
inline AttentionGeometry attention_geometry(const Shape& q, const Shape& v, bool causal) {
  AttentionGeometry g;
  const int r = q.rank();
  for (int i = 0; i < r - 2; ++i) g.batches *= q[i];
  g.tq = q[r - 2], g.d = q[r - 1], g.tk = v[r - 2], g.dv = v[r - 1];
  g.causal = causal;
  return g;
}

}  // namespace towerjit::kir
