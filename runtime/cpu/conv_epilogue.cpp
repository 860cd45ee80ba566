#include "runtime/cpu/conv_epilogue.h"

namespace towerjit::cpujit {

void ConvEpilogue::apply(float* image, int64_t channels, int64_t spatial) const {
  if (kind == kir::Epilogue::none) return;
  const bool relu = kind == kir::Epilogue::bias_relu;
  for (int64_t o = 0; o < channels; ++o) {
    float* plane = image + o * spatial;
    const float b = bias[o];
    // Written branch-free so that the compiler vectorises it.
    if (relu)
      for (int64_t p = 0; p < spatial; ++p) {
        const float v = plane[p] + b;
        plane[p] = v <= 0.0f ? 0.0f : v;
      }
    else
      for (int64_t p = 0; p < spatial; ++p) plane[p] += b;
  }
}

}  // namespace towerjit::cpujit
