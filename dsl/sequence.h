// Ops and layers of sequence models: index ranges and causal masks, gathers and embeddings,
// and the per-row normalisations of transformers. See docs/dsl.md ("Sequence models").
#pragma once

#include <string>

#include "dsl/ops.h"
#include "dsl/variables.h"

namespace towerjit {

// --- Index ranges and masks -----------------------------------------------------------------
// Each element's index along `axis` of `shape` (numpy's indices()[axis]); `shape` may hold B.
Tensor iota(Shape shape, int axis, DType dtype = DType::i32, Loc loc = Loc::current());
// 0, 1, ..., n - 1 (a vector of n).
Tensor arange(int64_t n, DType dtype = DType::i32, Loc loc = Loc::current());
// f32 [t, t]: 1 where key j <= query i (a query sees itself and the past), else 0.
Tensor causal_mask(int64_t t, Loc loc = Loc::current());
// x with the elements above the diagonal of its last two axes set to 0 (numpy's tril).
Tensor tril(Tensor x, Loc loc = Loc::current());

// --- Gathers --------------------------------------------------------------------------------
// The slices of `table` along `axis` at the i32 `indices` (numpy's take): the result's shape is
// table[:axis] + indices + table[axis+1:]. An index outside [0, table.dim(axis)) is an error
// when the graph runs, naming the input that fed the indices. Along axis 0 the gradient
// w.r.t. the table is sparse (dsl/sparse_gradients.h): the rows read and the values flowing
// back, which the optimiser applies to the touched rows alone. With `sparse` false (or along
// another axis) it is the dense scatter-add into a zero table, each row's sum in index order.
Tensor gather(Tensor table, Tensor indices, int axis = 0, Loc loc = Loc::current());
Tensor gather(Tensor table, Tensor indices, int axis, bool sparse, Loc loc = Loc::current());

struct EmbeddingOptions {
  // PyTorch's nn.Embedding draws N(0, 1); Keras' uniform(-0.05, 0.05).
  Initializer init = init::normal(0, 1);
  bool trainable = true;
  // The table's gradient as rows plus values (PyTorch's sparse=True, here the default);
  // false: the dense [vocab, dim] gradient, for an optimiser without a sparse apply.
  bool sparse = true;
};
// i32 `ids` of any shape -> f32 ids.shape + [dim]: rows of the variable "<name>/embeddings"
// [vocab, dim], gather(table, ids). Built again under a scope with reuse, it shares the table.
Tensor embedding(Tensor ids, int64_t vocab, int64_t dim, const std::string& name,
                 EmbeddingOptions options = {}, Loc loc = Loc::current());

// --- Normalisations over the last axis --------------------------------------------------------
struct NormOptions {
  double epsilon = 1e-5;  // PyTorch's default for both
  // One fused op forward (statistics and output in one pass over a row block) and two backward
  // (the input's gradient by row blocks; the gain's and bias' sums over the rows); false
  // composes mean, rsqrt and elementwise ops instead (several kernels; second derivatives).
  bool fused = true;
};
// (x - mean) / sqrt(var + epsilon) * gain + bias over the last axis, per row; var is biased.
// Learns "<name>/gain" (ones) and "<name>/bias" (zeros), of the last axis' size.
Tensor layer_norm(Tensor x, const std::string& name, NormOptions options = {}, Loc loc = Loc::current());
// x / sqrt(mean(x^2) + epsilon) * gain over the last axis, per row. Learns "<name>/gain" (ones).
Tensor rms_norm(Tensor x, const std::string& name, NormOptions options = {}, Loc loc = Loc::current());

// --- Attention --------------------------------------------------------------------------------
struct AttentionOptions {
  bool causal = false;  // query i sees keys j <= i (top-left aligned, as PyTorch's is_causal)
  double scale = 0;     // 0: 1 / sqrt(the head dimension)
  // One fused op (tiles over the keys, an online softmax, a backward that recomputes), which
  // never holds the [..., Tq, Tk] scores; false composes matmul, the mask and softmax instead.
  bool fused = true;
};
// softmax(q k^T * scale [masked]) v over the last two axes: q [..., Tq, d], k [..., Tk, d],
// v [..., Tk, dv] -> [..., Tq, dv], leading axes broadcast as matmul's. Fused by default: the
// forward and backward never hold the [..., Tq, Tk] scores or probabilities (docs/dsl.md).
Tensor scaled_dot_product_attention(Tensor q, Tensor k, Tensor v, AttentionOptions options = {},
                                    Loc loc = Loc::current());

}  // namespace towerjit
