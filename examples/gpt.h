// A GPT-style character model in the DSL, for examples/char_lm.cpp and the gpt-small bench
// case: token embedding plus learned positions, `layers` pre-norm blocks (causal multi-head
// attention, then a GELU MLP of 4 x dim), a final layer norm, and an output projection tied to
// the token embedding (logits = h · embeddingᵀ, as GPT-2's).
#pragma once

#include <cstdint>
#include <string>

#include "towerjit.h"

namespace examples {

struct GptConfig {
  int64_t vocab = 0;    // characters
  int64_t context = 64; // T: tokens a window holds
  int64_t dim = 64;     // D: the model's width
  int64_t heads = 4;    // D must divide by it
  int64_t layers = 2;
  std::string str() const {
    return "GPT vocab " + std::to_string(vocab) + ", context " + std::to_string(context) + ", dim " +
           std::to_string(dim) + ", " + std::to_string(heads) + " heads, " + std::to_string(layers) + " layers";
  }
};

namespace gpt_detail {

namespace tj = towerjit;

// [B, T, D] -> [B, H, T, D/H]: each head's slice of the features.
inline tj::Tensor split_heads(tj::Tensor x, const GptConfig& c) {
  return tj::transpose(tj::reshape(x, {tj::kBatch, c.context, c.heads, c.dim / c.heads}), {0, 2, 1, 3});
}

inline tj::Tensor merge_heads(tj::Tensor x, const GptConfig& c) {
  return tj::reshape(tj::transpose(x, {0, 2, 1, 3}), {tj::kBatch, c.context, c.dim});
}

// Causal self-attention: queries, keys and values from one projection each, attention per
// head, the heads merged and projected back to D.
inline tj::Tensor attention(tj::Tensor x, const GptConfig& c, const std::string& name) {
  const tj::Tensor q = split_heads(tj::dense(x, c.dim, name + "/query"), c);
  const tj::Tensor k = split_heads(tj::dense(x, c.dim, name + "/key"), c);
  const tj::Tensor v = split_heads(tj::dense(x, c.dim, name + "/value"), c);
  const tj::Tensor heads = tj::scaled_dot_product_attention(q, k, v, {.causal = true});
  return tj::dense(merge_heads(heads, c), c.dim, name + "/out");
}

inline tj::Tensor mlp(tj::Tensor x, const GptConfig& c, const std::string& name) {
  return tj::dense(tj::gelu(tj::dense(x, 4 * c.dim, name + "/up")), c.dim, name + "/down");
}

// Pre-norm: each sublayer reads a normalised copy and adds to the residual stream.
inline tj::Tensor block(tj::Tensor x, const GptConfig& c, const std::string& name) {
  x = x + attention(tj::layer_norm(x, name + "/ln1"), c, name + "/attn");
  return x + mlp(tj::layer_norm(x, name + "/ln2"), c, name + "/mlp");
}

}  // namespace gpt_detail

// i32 tokens [B, T] -> logits [B, T, vocab].
inline towerjit::Tensor gpt(towerjit::Tensor tokens, const GptConfig& c) {
  namespace tj = towerjit;
  // GPT-2's N(0, 0.02): with the output tied to it, N(0, 1) rows would start the logits with
  // a spread of sqrt(D) and the loss far above log(vocab).
  const tj::Tensor tok = tj::embedding(tokens, c.vocab, c.dim, "tok", {.init = tj::init::normal(0, 0.02)});
  const tj::Tensor pos = tj::variable("pos/embeddings", {c.context, c.dim}, {.init = tj::init::normal(0, 0.02)});
  tj::Tensor h = tok + pos;  // [B, T, D] + [T, D]
  for (int64_t l = 0; l < c.layers; ++l) h = gpt_detail::block(h, c, "block" + std::to_string(l));
  h = tj::layer_norm(h, "ln_f");
  // The tied projection: the same table that embedded the tokens scores them.
  tj::Tensor table;
  {
    tj::VariableScope tied("tok", tj::Reuse::yes);
    table = tj::variable("embeddings", {c.vocab, c.dim});
  }
  return tj::matmul(h, tj::transpose(table));  // [B, T, D] x [D, vocab]
}

}  // namespace examples
