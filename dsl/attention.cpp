// scaled_dot_product_attention: one fused Attention node (ops.def) by default, whose kernels
// tile over the keys with an online softmax and never write the [..., Tq, Tk] scores; or, with
// fused = false, the first version composed of public ops (matmul, the causal mask, softmax),
// which every backend runs with nothing of its own and which the fused one is checked against.
#include <cmath>
#include <optional>

#include "dsl/ops_internal.h"
#include "dsl/sequence.h"

namespace towerjit {

using namespace detail;

namespace {

// The leading axes of q, k and v made equal (broadcast as matmul would), then one Attention
// node and the slice of its output without the log-sum-exp column. nullopt when the leading
// axes do not broadcast: the composed form then reports it, as matmul.
std::optional<Tensor> fused_attention(Tensor q, Tensor k, Tensor v, bool causal, double scale, Loc loc) {
  const auto lead = [](const Tensor& t) {
    return Shape(std::vector<int64_t>(t.shape().dims().begin(), t.shape().dims().end() - 2));
  };
  std::optional<Shape> common = broadcast_shapes(lead(q), lead(k));
  if (common) common = broadcast_shapes(*common, lead(v));
  if (!common) return std::nullopt;
  for (Tensor* t : {&q, &k, &v}) {
    if (lead(*t) == *common) continue;
    std::vector<int64_t> dims = common->dims();
    dims.push_back(t->shape()[t->rank() - 2]);
    dims.push_back(t->shape()[t->rank() - 1]);
    *t = broadcast_to(*t, Shape(std::move(dims)), loc);
  }
  std::vector<int64_t> dims = q.shape().dims();
  const int64_t dv = v.shape()[v.rank() - 1];
  dims.back() = dv + 1;
  Attrs attrs;
  attrs.value = scale;
  attrs.causal = causal;
  const Tensor packed = make(q.graph(), Op::Attention, {q.id(), k.id(), v.id()}, Shape(dims), DType::f32, attrs, loc);
  std::vector<int64_t> begin(dims.size(), 0), end = dims;
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] == kBatch) end[i] = kBatch;
  end.back() = dv;
  return slice(packed, begin, end, loc);
}

}  // namespace

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
  GraphScope use(g);
  if (options.fused) {
    if (std::optional<Tensor> y = fused_attention(q, k, v, options.causal, scale, loc)) return *y;
  }
  std::vector<int> perm(k.rank());
  for (int i = 0; i < k.rank(); ++i) perm[i] = i;
  std::swap(perm[k.rank() - 2], perm[k.rank() - 1]);
  Tensor scores = mul(matmul(q, transpose(k, perm, loc), loc), Operand(scale, loc), loc);
  if (options.causal) {
    // key j <= query i; a masked score is -1e30, so exp() gives 0 and a row always keeps key 0.
    Tensor keep = less_equal(iota({tq, tk}, 1, DType::f32, loc), iota({tq, tk}, 0, DType::f32, loc), loc);
    scores = where(keep, scores, Operand(-1e30, loc), loc);
  }
  return matmul(softmax(scores, -1, loc), v, loc);
}

}  // namespace towerjit
