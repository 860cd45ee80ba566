// A dense layer's forward is a product, then a loop kernel act(product + bias) over rows
// (bias: one value per output column); a convolution's is the convolution, then
// act(result + bias) with one bias value per output channel. This pass finds a MatMul or a
// Conv2D whose result only that kernel reads, where the kernel is nothing but
// `add(result, bias)` or `relu(add(result, bias))` stored once, and gives the call the epilogue
// instead: the bias becomes its third input, the call writes the kernel's output, and the
// kernel and the result's temporary go.
//
// Products: the cuBLASLt backend runs it as CUBLASLT_EPILOGUE_BIAS or RELU_BIAS, the CPU as a
// pass over each product's rows after the sgemm. Convolutions: the CPU applies it to each
// output as it stores it (the cnn's 1->16 layer's bias and ReLU had been a pass over 6.4 MB
// from memory of its own; runtime/cpu/conv_epilogue.h); the GPU's implicit GEMM as it stores,
// a kernel after cuDNN's forward. Every backend computes the kernel's own float operations, so
// results do not change.
//
// Not matched (the kernel stays): anything else in the kernel, a second store (the
// pre-activation kept for a gradient), a result read by any other step or fetched, a bias
// written between the call and the kernel, summed batches, non-f32 values. GELU is not an
// epilogue: cuBLASLt's GELU epilogue is the tanh approximation, the DSL's gelu the erf form
// (docs/cuda.md). TOWERJIT_MATMUL_EPILOGUES=off and TOWERJIT_CONV_EPILOGUES=off turn each kind
// off.
#pragma once

#include "jit/kir/kernel_ir.h"

namespace towerjit {

kir::Program fuse_epilogues(kir::Program program);

}  // namespace towerjit
