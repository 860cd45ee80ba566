// scaled_dot_product_attention, the first version: composed of public ops, so autodiff and
// every backend run it with nothing of their own. Its forward holds the [..., Tq, Tk] scores
// and probabilities (fusion makes the mask and scale part of the kernels around them, but the
// two matrix products need the whole matrix); the fused form, tiles with an online softmax
// that never writes them, is to replace it behind the same call.
#include <cmath>

#include "dsl/ops_internal.h"
#include "dsl/sequence.h"

namespace towerjit {

using namespace detail;

Tensor scaled_dot_product_attention(Tensor q, Tensor k, Tensor v, AttentionOptions options, Loc loc) {
  Operand oq(q, loc), ok(k, loc), ov(v, loc);
  Graph& g = graph_of({&oq, &ok, &ov}, "scaled_dot_product_attention", loc);
  const char* op = "scaled_dot_product_attention";
  for (const Tensor* t : {&q, &k, &v}) {
    user_check(t->rank() >= 2, loc) << op << ": expects q, k and v of rank 2 or more ([..., T, d]) but got "
                                    << t->describe() << in_scope(g);
    require_f32(*t, op, loc);
  }
  const auto dim = [](const Tensor& t, int from_end) { return t.shape()[t.rank() - from_end]; };
  user_check(dim(q, 1) == dim(k, 1), loc)
      << op << ": q " << q.describe() << " and k " << k.describe() << " differ in the head dimension (the last axis)"
      << in_scope(g) << "; queries and keys must have the same size d";
  user_check(dim(k, 2) == dim(v, 2), loc)
      << op << ": k " << k.describe() << " and v " << v.describe() << " differ in the number of keys (the second-to-last axis)"
      << in_scope(g) << "; every key needs its value";
  const int64_t tq = dim(q, 2), tk = dim(k, 2), d = dim(q, 1);
  user_check(tq != kBatch && tk != kBatch && d != kBatch, loc)
      << op << ": the last two axes of q " << q.describe() << " and k " << k.describe() << in_scope(g)
      << " hold the batch dimension B; put the batch first, e.g. [B, heads, T, d]";
  user_check(options.scale >= 0, loc) << op << ": scale " << options.scale << in_scope(g)
                                      << " must be positive, or 0 for 1 / sqrt(d)";
  const double scale = options.scale > 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<int> perm(k.rank());
  for (int i = 0; i < k.rank(); ++i) perm[i] = i;
  std::swap(perm[k.rank() - 2], perm[k.rank() - 1]);
  GraphScope use(g);
  Tensor scores = mul(matmul(q, transpose(k, perm, loc), loc), Operand(scale, loc), loc);
  if (options.causal) {
    // key j <= query i; a masked score is -1e30, so exp() gives 0 and a row always keeps key 0.
    Tensor keep = less_equal(iota({tq, tk}, 1, DType::f32, loc), iota({tq, tk}, 0, DType::f32, loc), loc);
    scores = where(keep, scores, Operand(-1e30, loc), loc);
  }
  return matmul(softmax(scores, -1, loc), v, loc);
}

}  // namespace towerjit
