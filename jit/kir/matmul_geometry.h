// The shape of a MatMul library call as a backend runs it: a batch of row-major GEMMs over the
// last two axes, the leading axes broadcast numpy-style (a size-1 batch axis of an operand is
// reused for every output batch). Shared by the CPU (OpenBLAS) and CUDA (cuBLAS) backends.
#pragma once

#include <cstdint>
#include <vector>

#include "dsl/shape.h"
#include "jit/kir/kernel_ir.h"

namespace towerjit::kir {

struct MatMulGeometry {
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0;          // leading dimensions of a and b as stored
  int64_t batches = 1;               // output matrices
  std::vector<int64_t> offset_a, offset_b;  // elements from a's / b's start to each batch's matrix
};

// `a`, `b`, `out`: the bound (concrete) shapes of the call's operands and result.
inline MatMulGeometry matmul_geometry(const LibraryCall& c, const Shape& a, const Shape& b, const Shape& out) {
  const int ra = a.rank(), rb = b.rank(), ro = out.rank();
  MatMulGeometry g;
  g.m = out[ro - 2], g.n = out[ro - 1];
  g.k = c.transpose_a ? a[ra - 2] : a[ra - 1];
  g.lda = c.transpose_a ? g.m : g.k, g.ldb = c.transpose_b ? g.k : g.n;
  for (int i = 0; i < ro - 2; ++i) g.batches *= out[i];
  if (c.sum_batches)  // out is one [m, n]; the operands' batches stack along k (both read so)
    for (int i = 0; i < ra - 2; ++i) g.k *= a[i];
  g.offset_a.resize(g.batches), g.offset_b.resize(g.batches);
  for (int64_t bi = 0; bi < g.batches; ++bi) {
    int64_t rem = bi, oa = 0, ob = 0, sa = g.m * g.k, sb = g.k * g.n;
    for (int i = ro - 3; i >= 0; --i) {
      const int64_t idx = rem % out[i];
      rem /= out[i];
      const int ia = i - (ro - ra), ib = i - (ro - rb);
      if (ia >= 0) { oa += (a[ia] == 1 ? 0 : idx) * sa; sa *= a[ia]; }
      if (ib >= 0) { ob += (b[ib] == 1 ? 0 : idx) * sb; sb *= b[ib]; }
    }
    g.offset_a[bi] = oa, g.offset_b[bi] = ob;
  }
  return g;
}

// A batch of products that all share one right operand, with left operands stored one after
// the other untransposed (a dense layer applied to [B, T, D] activations: B products of
// [T, D] x [D, N]), is one product of [B·T, D] x [D, N]: the same sums, as one call a BLAS runs
// at a far better rate than B small ones. Returns whether it folded `g`.
inline bool fold_batches_into_rows(const LibraryCall& c, MatMulGeometry& g) {
  if (g.batches < 2 || c.transpose_a) return false;
  for (int64_t bi = 1; bi < g.batches; ++bi)
    if (g.offset_b[bi] != g.offset_b[0] || g.offset_a[bi] != g.offset_a[0] + bi * g.m * g.k) return false;
  g.m *= g.batches;
  g.batches = 1;
  g.offset_a.resize(1), g.offset_b.resize(1);
  return true;
}

}  // namespace towerjit::kir
