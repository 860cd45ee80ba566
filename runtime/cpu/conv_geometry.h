// One convolution's sizes, as both CPU paths (conv.cpp's im2col, direct_conv.cpp's kernels) read
// them from the attributes and the bound shapes, and the per-thread scratch they share.
#pragma once

#include <cstdint>
#include <vector>

#include "dsl/node.h"

namespace towerjit::cpujit {

// `c` input channels of h x w over a batch of n, `o` output channels of oh x ow, a kh x kw
// window at stride (sh, sw) over the input padded by (ph, pw).
struct ConvGeometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  int64_t sh, sw, ph, pw;
  int64_t ckk() const { return c * kh * kw; }  // one output's taps
  int64_t spatial() const { return oh * ow; }
  int64_t hp() const { return h + 2 * ph; }  // the padded input
  int64_t wp() const { return w + 2 * pw; }
};

// From the input x [N, C, H, W], the filter w [O, C, KH, KW] and the output y [N, O, OH, OW].
inline ConvGeometry conv_geometry(const Attrs& at, const Shape& x, const Shape& w, const Shape& y) {
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], at.stride[0], at.stride[1], at.pad[0], at.pad[1]};
}

// Scratch memory reused across calls on a thread (slots 0 to 3): a training step convolves
// many times. Slots 0 and 1 are the kernels' own (a packed image, its results); 2 and 3 hold a
// 16-bit image widened, or a 16-bit result before rounding (conv_images.h).
// Each starts on a 64-byte boundary: the kernels' vectors of 16 channels are then whole cache
// lines, where a line split costs a load twice.
inline float* conv_scratch(int slot, int64_t floats) {
  constexpr int64_t kLine = 16;  // floats
  thread_local std::vector<float> buffers[4];
  if (static_cast<int64_t>(buffers[slot].size()) < floats + kLine) buffers[slot].resize(floats + kLine);
  const auto at = reinterpret_cast<uintptr_t>(buffers[slot].data());
  return buffers[slot].data() + (kLine - at / sizeof(float) % kLine) % kLine;
}

}  // namespace towerjit::cpujit
