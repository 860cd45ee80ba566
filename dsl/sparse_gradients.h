// Sparse gradients: the gradient of a gather along axis 0 as the rows it read and the values
// that flow back to them (TF's IndexedSlices, PyTorch's nn.Embedding(sparse=True)).
//
// In the graph a sparse gradient is the GatherGrad node autodiff builds for a gather: its two
// inputs are the pair (indices, values) and its shape is the table's. The node stays unevaluated
// unless something reads it densely (a fetch, a sum with a dense gradient, a collective);
// Optimizer::apply reads the pair instead and updates the touched rows alone
// (dsl/optimizers.cpp), so no table-sized gradient is ever built. docs/dsl.md states the rule.
#pragma once

#include <optional>
#include <string>

#include "dsl/tensor.h"

namespace towerjit {

struct SparseGradient {
  Tensor indices;     // i32 [N...]: the rows read, with repeats
  Tensor values;      // f32 [N..., D...]: the gradient flowing to each read
  Shape dense_shape;  // the table's [V, D...]
  std::string source; // the input that fed the indices ("" if none), for index errors
};

// The pair when `grad` is a sparse gradient: the gradient of gathers along axis 0 built with
// sparse = true (the default), and nothing else; std::nullopt for any other tensor.
std::optional<SparseGradient> as_sparse(const Tensor& grad);

namespace detail {

// a + b for two parts of one node's gradient (autodiff's accumulation). Two sparse parts of
// one table whose indices have the same leading axes stay sparse: their indices and values
// are concatenated along the last index axis (the first part's reads first). Any other pair
// is a dense sum.
Tensor add_gradients(Tensor a, Tensor b, Loc loc);

// A sparse gradient of the same table as the sparse gradient `like` (its shape, its source for
// index errors) made of other `indices` and `values`: the apply side of a tower program reads
// the towers' concatenated rows and values through one (dsl/tower_program.h).
Tensor sparse_gradient_like(const Tensor& like, Tensor indices, Tensor values, Loc loc);

// At every position, the sum of the values whose index is the same, in index order: each
// touched row's gradient, bitwise what the dense GatherGrad computes for that row.
Tensor combine_rows(const SparseGradient& g, Loc loc);
// `table`'s rows at the gradient's indices (f32 [N..., D...]).
Tensor gather_rows(Tensor table, const SparseGradient& g, Loc loc);
// `table` with the rows at the gradient's indices replaced by `rows` (f32 [N..., D...]; the
// positions of one index must hold one value, as anything computed from gather_rows and
// combine_rows does).
Tensor scatter_rows(Tensor table, const SparseGradient& g, Tensor rows, Loc loc);

}  // namespace detail

}  // namespace towerjit
