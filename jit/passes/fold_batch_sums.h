// A weight's gradient through a product over leading axes, sum_b x_b^T dy_b (a dense layer
// applied to [B, T, D]), is lowered as a batch of B products into a [B, D, N] temporary and a
// kernel summing its batch. The batch of a product is the same sum as the products' inner
// dimension taken B times as long: [B·T, D]^T x [B·T, N], one product into [D, N]. This pass
// finds a product read only by such a sum, marks the call `sum_batches` and writes the sum's
// output from it directly; the sum kernel and the temporary go (jit/kir/matmul_geometry.h folds
// the batch into k for both backends).
#pragma once

#include "jit/kir/kernel_ir.h"

namespace towerjit {

kir::Program fold_batch_summed_products(kir::Program program);

}  // namespace towerjit
