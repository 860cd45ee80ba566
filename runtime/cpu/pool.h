// Max and average pooling and their gradients on the CPU, split over (image, channel) planes.
#pragma once

#include <vector>

#include "dsl/node.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/library.h"
#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// op: MaxPool2D / AvgPool2D (inputs {x}), MaxPool2DGrad (inputs {x, dy}), AvgPool2DGrad ({dy}).
void pool2d(Op op, const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool);

// A convolution's pool (jit/passes/conv_pools.h): the 2x2, stride-2 max pool of `planes` f32
// planes [h][w] at x (h and w even) into pooled [planes][h/2][w/2], each window's code into
// codes (a byte each, in the same order); the same values as pool2d's MaxPool2D, the winner its
// gradient's. `level`: the vector level whose row kernels run.
void max_pool2x2_with_codes(const float* x, int64_t planes, int64_t h, int64_t w, float* pooled, uint8_t* codes,
                            CpuIsa level);

// The same pool over the pixels [oh*ow][ld] of a direct convolution's result, channels along
// the rows (channels <= ld, ld a multiple of 8), act(v + bias[c]) applied first as the
// epilogue's transpose does (bias null: none; `relu`: the DSL's relu): pooled values and codes
// (i32 here: they are transposed next) into [oh/2*ow/2][ld] at `pooled` and `codes`, the same
// bits as pooling the NCHW result. Needs AVX2.
void max_pool2x2_pixels_with_codes(const float* x, int64_t oh, int64_t ow, int64_t channels, int64_t ld,
                                   const float* bias, bool relu, float* pooled, int32_t* codes);

// i32 codes into bytes: to[j] = from[j] for j < n (each 0-7).
void narrow_codes(const int32_t* from, int64_t n, uint8_t* to);

// The routing of pooled dy [N, C, H/2, W/2] (f32) by the codes of a pooling convolution
// (kir::LibraryCall::codes: [N, kir::pool_code_words(C * H/2 * W/2)] i32, a byte a window).
RoutedPoolGradient routed_by_codes(const View& codes, const View& dy, bool relu_mask);

// MaxPool2DGrad routed by those codes: dx [N, C, H, W] from codes and dy [N, C, H/2, W/2] (f32),
// dy at each window's coded position, +0 elsewhere; with at.relu_mask only at codes below 4.
// The same bits as pool2d's MaxPool2DGrad on the pool's input.
void max_pool2d_grad_by_codes(const Attrs& at, const View& codes, const View& dy, const View& dx, ThreadPool* pool);

// The same for `rows` pooled rows of `ow` windows from pooled row `first` on (counted over
// the batch, images one after another): dx's 2 * rows rows of 2 * ow floats from `dx` on, each
// `stride` floats after the last (2 * ow: one after another; a direct convolution's packed
// image routes a plane's rows between the other channels' rows).
void route_pool_rows(const RoutedPoolGradient& r, int64_t first, int64_t rows, int64_t ow, float* dx, int64_t stride);

// Image i of the same ([channels, h, w], h and w even) into out [h * w][ld] (channels along the
// rows, ld >= channels; the columns past them +0), as the direct filter gradient reads its dy:
// the pooled dy and the codes transposed first (a quarter of the image each), then each
// window's four pixels written whole vectors of channels at a time, where routing into NCHW and
// transposing the whole image had been two passes over it. `scratch`: room for
// 2 * (h/2 * w/2) * ld + channels * (h/2 * w/2) floats. The same values as route_pool_rows.
void route_pool_image_channels_last(const RoutedPoolGradient& r, int64_t i, int64_t channels, int64_t h, int64_t w,
                                    float* out, int64_t ld, float* scratch);

}  // namespace towerjit::cpujit
