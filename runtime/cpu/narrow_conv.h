// Convolutions whose taps are few (an image's first layer: 1 to 4 input channels, 9 to 36 taps)
// or whose outputs are few (that layer's input gradient: 1 to 4 output channels). The direct
// kernels of direct_conv.cpp hold a block of output channels in vector lanes and sum over the
// taps, so with 9 taps each block does 9 steps of work and then stores, transposes and
// reloads its results; with one output channel 15 of their 16 lanes idle. Here the vector lanes
// run along the output pixels instead (NCHW, as the tensors are laid out): each image's
// window rows are copied once into a small tile (`WindowRows`), and a register block of output
// channels x pixels (forward) or output channels x taps (filter gradient) reads them
// contiguously, so its rate does not depend on the channel count and results are stored
// straight into y, or summed into per-lane partial sums.
#pragma once

#include <cstdint>

#include "runtime/cpu/conv_epilogue.h"
#include "runtime/cpu/conv_geometry.h"
#include "runtime/cpu/library.h"
#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// At most this many input channels (forward, filter gradient) or output channels (input
// gradient) take these kernels.
constexpr int64_t kNarrowChannels = 4;

// y [N, O, OH, OW] = conv(x [N, C, H, W], w [O, C, KH, KW]) (`w` read as [O][C*KH*KW]); x and
// y of any float dtype, an image at a time in f32 (conv_images.h), `epilogue` applied to each.
// `avx512`: the AVX-512 kernels, else AVX2 + FMA; the caller checks the CPU has them.
void narrow_conv_forward(const ConvGeometry& g, bool avx512, const View& x, const float* w, const View& y,
                         const ConvEpilogue& epilogue, ThreadPool* pool);

// dw [O, C, KH, KW] = the sum over the batch of dy x the windows of x: a fixed 16 chunks of
// the batch, each summed in image order, then the chunks in order: the same bits on any
// number of threads.
void narrow_conv_grad_filter(const ConvGeometry& g, bool avx512, const View& x, const View& dy, float* dw,
                             ThreadPool* pool);

}  // namespace towerjit::cpujit
