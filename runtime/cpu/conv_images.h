// A convolution's batch tensors one image at a time in f32, whatever their dtype (or routed
// from a pool's codes, library.h's RoutedPoolGradient, into scratch), for the
// direct kernels (direct_conv.cpp, narrow_conv.cpp): an f32 image is used in place; a bf16 or
// f16 one (the precision policy's, jit/passes/half_convolutions.h) is widened into this
// thread's scratch as its turn comes, and a 16-bit result is written to scratch and rounded
// into place once the image is done. The per-image copies stay in cache, so a 16-bit
// convolution moves 2 bytes an element through memory, where widening and rounding whole
// tensors had been passes of their own (resnet-bn's bf16 step 1.27x its f32 one).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cpu/library.h"
#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// Image i (of `elements` each) of `v` as f32: in place, or widened into scratch `slot`
// (conv_geometry.h's conv_scratch) of the calling thread.
const float* image_in(const View& v, int64_t i, int64_t elements, int slot);
// Where to write image i of `v` in f32: in place, or scratch `slot`; then image_done(v, i,
// elements, written) rounds a 16-bit image into place (nothing for f32).
float* image_out(const View& v, int64_t i, int64_t elements, int slot);
void image_done(const View& v, int64_t i, int64_t elements, const float* written);

// Asks the caches for slice `part` of `parts` of image i of `v` (into L2: the kernels' own
// packed copies keep L1). The direct kernels call it for the next image while they compute
// the current one, so its first reads and writes do not wait on memory: an image's kernels do
// no memory traffic of their own, and without it each image began with a burst the core
// stalled on (a 16-channel 28x28 forward at batch 128: 2.2 ms on buffers in cache, 2.8 ms on
// buffers that were not).
void prefetch_image(const View& v, int64_t i, int64_t elements, int64_t part, int64_t parts);
// The same for image i of `bytes` bytes each from `data` on.
void prefetch_bytes(const void* data, int64_t bytes, int64_t i, int64_t part, int64_t parts);

// `v` with its values in memory: itself, or a routed pool gradient (library.h) routed into
// `keep` whole, split over the pool (for the im2col path, which reads whole tensors).
View in_memory(const View& v, std::vector<float>& keep, ThreadPool* pool);

// All of `v` as f32 (a filter: small): in place, or widened into `keep`.
const float* as_floats(const View& v, std::vector<float>& keep);

}  // namespace towerjit::cpujit
