// The optimisers' sparse apply: updates of a variable whose gradient is sparse
// (dsl/sparse_gradients.h) that read and write only the rows its gather touched, or the
// dense arithmetic the optimiser's semantics need (momentum's decay) without a dense gradient.
// Used by Optimizer::apply; docs/optimizers.md lists what each optimiser does.
#pragma once

#include <vector>

#include "dsl/optimizers.h"
#include "dsl/sparse_gradients.h"

namespace towerjit::detail {

// Errors (towerjit::Error at `loc`, naming the variable and the fix sparse = false) when `o`
// cannot apply a sparse gradient to `w`: rmsprop (its slots decay on every row), weight
// decay (it reads every row), clipping by global norm (not computed from rows yet).
void check_sparse_apply(const Optimizer& o, const Tensor& w, Loc loc);
// Whether `o` applies sparse gradients (check_sparse_apply would not refuse it).
bool can_apply_sparse(const Optimizer& o);
// Whether `o`'s sparse apply changes only the rows of its gradient (SGD, Adagrad, SparseAdam),
// so a copy of the variable is refreshed by those rows alone; momentum moves every row.
bool sparse_apply_changes_only_its_rows(const Optimizer& o);

// Appends the update ops of `w` for the sparse gradient `g` to `out`; `lr` is the learning
// rate at the step before the update, `t` the update's number (global step + 1).
void sparse_apply(const Optimizer& o, Tensor lr, Tensor t, Tensor w, const SparseGradient& g,
                  std::vector<Tensor>& out, Loc loc);

}  // namespace towerjit::detail
