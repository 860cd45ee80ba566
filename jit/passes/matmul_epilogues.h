// A dense layer's forward is a product, then a loop kernel act(product + bias) over rows
// (bias: one value per output column). This pass finds a MatMul whose result only that kernel
// reads, where the kernel is nothing but `add(product, bias)` or `relu(add(product, bias))`
// stored once, and gives the call the epilogue instead: the bias becomes its third input, the
// call writes the kernel's output, and the kernel and the product's temporary go. The
// cuBLASLt backend runs it as CUBLASLT_EPILOGUE_BIAS or RELU_BIAS, the CPU as a pass over each
// product's rows after the sgemm; both compute the kernel's own float operations, so results
// do not change.
//
// Not matched (the kernel stays): anything else in the kernel, a second store (the
// pre-activation kept for a gradient), a product read by any other step or fetched, a bias
// written between the product and the kernel, summed batches, non-f32 values. GELU is not an
// epilogue: cuBLASLt's GELU epilogue is the tanh approximation, the DSL's gelu the erf form
// (docs/cuda.md). TOWERJIT_MATMUL_EPILOGUES=off turns the pass off.
#pragma once

#include "jit/kir/kernel_ir.h"

namespace towerjit {

kir::Program fuse_matmul_epilogues(kir::Program program);

}  // namespace towerjit
