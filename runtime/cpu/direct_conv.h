// Direct convolutions on the CPU (AVX-512, or AVX2 + FMA): no im2col columns. The batched
// im2col of conv.cpp spends most of a small-channel convolution writing and reading its
// columns (14 MB for a 16-channel 14x14 layer at batch 128) and reordering between NCHW and the
// GEMM's layout; here each image is packed once into a padded copy that stays in cache (its
// rows channel after channel for the forward pass and the input gradient, channels last for
// the filter gradient), and a register-blocked kernel (AVX2: 6 pixels x 16 output channels of
// accumulators; AVX-512: 12 x 32, or 24 x 16 for narrow layers) reads it in place. Images are
// split over the thread pool; each thread prefetches its next image while it computes one. Layers with at most 4 input channels (forward, filter gradient) or whose
// input gradient has at most 4 channels take narrow_conv.h's kernels instead.
//
// Each function returns false, having done nothing, when the CPU lacks AVX2/FMA, the
// TOWERJIT_DIRECT_CONV knob is off, or the geometry is one it does not cover (the input
// gradient of a strided convolution); the caller then runs the im2col path.
#pragma once

#include "dsl/node.h"
#include "runtime/cpu/conv_epilogue.h"
#include "runtime/cpu/library.h"
#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

bool direct_conv2d(const Attrs& at, const View& x, const View& w, const View& y, ThreadPool* pool,
                   const ConvEpilogue& epilogue = {});
bool direct_conv2d_grad_input(const Attrs& at, const View& dy, const View& w, const View& dx, ThreadPool* pool);
bool direct_conv2d_grad_filter(const Attrs& at, const View& x, const View& dy, const View& dw, ThreadPool* pool);

}  // namespace towerjit::cpujit
