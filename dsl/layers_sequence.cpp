// The layers of dsl/sequence.h. Each opens VariableScope(name), gets its variables there and
// builds its expression from public ops, as dsl/layers.cpp does. The normalisations are one
// fused LayerNorm node each (ops.def), whose kernels take a row block through its statistics
// and its output in one pass; with NormOptions::fused false they are composites, whose
// statistics the fusion plan computes in one reduction kernel each (docs/dsl.md shows both).
#include "dsl/ops_internal.h"
#include "dsl/sequence.h"

namespace towerjit {

using detail::in_scope;

namespace {

// The checks of every normalisation: a named f32 input whose last axis has a fixed size.
Graph& norm_graph(const Tensor& x, const char* layer, const std::string& name, double epsilon, Loc loc) {
  user_check(x.valid(), loc) << layer << " \"" << name << "\": the input is an empty tensor; "
                             << "build it with an op (input(), another layer) first";
  Graph& g = x.graph();
  user_check(!name.empty(), loc) << layer << ": the name is empty" << in_scope(g)
                                 << "; layers need a name to scope their variables, e.g. \"ln1\"";
  detail::require_f32(x, layer, loc);
  user_check(x.rank() >= 1 && x.shape()[x.rank() - 1] != kBatch, loc)
      << layer << " \"" << name << "\": normalises over the last axis, but " << x.describe() << in_scope(g)
      << (x.rank() == 0 ? " is a scalar" : " has the batch dimension B there")
      << "; put the features last, e.g. [B, T, features]";
  user_check(epsilon > 0, loc) << layer << " \"" << name << "\": epsilon " << epsilon << " must be positive"
                               << in_scope(g);
  return g;
}

Initializer ones() { return init::constant(1.0); }

// The fused node: (x, gain[, bias]) -> x's shape (ops.def: LayerNorm).
Tensor fused_norm(Graph& g, const Tensor& x, std::vector<int> params, double epsilon, bool rms, Loc loc) {
  Attrs attrs;
  attrs.value = epsilon;
  attrs.rms = rms;
  params.insert(params.begin(), x.id());
  return detail::make(g, Op::LayerNorm, std::move(params), x.shape(), DType::f32, attrs, loc);
}

}  // namespace

Tensor embedding(Tensor ids, int64_t vocab, int64_t dim, const std::string& name, EmbeddingOptions options,
                 Loc loc) {
  user_check(ids.valid(), loc) << "embedding \"" << name << "\": the ids are an empty tensor; "
                               << "build them with an op (input(\"ids\", {kBatch, T}, DType::i32)) first";
  Graph& g = ids.graph();
  user_check(!name.empty(), loc) << "embedding: the name is empty" << in_scope(g)
                                 << "; layers need a name to scope their variables, e.g. \"embed\"";
  user_check(ids.dtype() == DType::i32, loc)
      << "embedding \"" << name << "\": expects i32 ids but got " << ids.describe() << in_scope(g)
      << "; declare the input DType::i32 or convert with cast(x, DType::i32)";
  user_check(vocab > 0 && dim > 0, loc) << "embedding \"" << name << "\": vocab (" << vocab << ") and dim ("
                                        << dim << ") must be positive" << in_scope(g);
  GraphScope use(g);
  VariableScope scope(name);
  Tensor table = variable("embeddings", {vocab, dim}, {.init = options.init, .trainable = options.trainable}, loc);
  return gather(table, ids, 0, options.sparse, loc);
}

Tensor layer_norm(Tensor x, const std::string& name, NormOptions options, Loc loc) {
  Graph& g = norm_graph(x, "layer_norm", name, options.epsilon, loc);
  const int last = x.rank() - 1;
  const int64_t features = x.shape()[last];
  GraphScope use(g);
  VariableScope scope(name);
  Tensor gain = variable("gain", {features}, {.init = ones()}, loc);
  Tensor bias = variable("bias", {features}, {.init = init::zeros()}, loc);
  if (options.fused) return fused_norm(g, x, {gain.id(), bias.id()}, options.epsilon, false, loc);
  // Two-pass variance (of the centred values): mean(x^2) - mean(x)^2 would let both
  // statistics share one kernel but cancels catastrophically when |mean| >> std.
  Tensor centered = sub(x, mean(x, {last}, true, loc), loc);
  Tensor var = mean(mul(centered, centered, loc), {last}, true, loc);
  Tensor inv = rsqrt(add(var, Operand(options.epsilon, loc), loc), loc);
  return add(mul(mul(centered, inv, loc), gain, loc), bias, loc);
}

Tensor rms_norm(Tensor x, const std::string& name, NormOptions options, Loc loc) {
  Graph& g = norm_graph(x, "rms_norm", name, options.epsilon, loc);
  const int last = x.rank() - 1;
  const int64_t features = x.shape()[last];
  GraphScope use(g);
  VariableScope scope(name);
  Tensor gain = variable("gain", {features}, {.init = ones()}, loc);
  if (options.fused) return fused_norm(g, x, {gain.id()}, options.epsilon, true, loc);
  Tensor inv = rsqrt(add(mean(mul(x, x, loc), {last}, true, loc), Operand(options.epsilon, loc), loc), loc);
  return mul(mul(x, inv, loc), gain, loc);
}

}  // namespace towerjit
