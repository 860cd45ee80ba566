#include "runtime/cpu/conv_epilogue.h"

#include "runtime/cpu/conv_geometry.h"
#include "runtime/cpu/conv_images.h"
#include "runtime/cpu/pool.h"
#include "runtime/cpu/transpose.h"

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

namespace {

int64_t image_elements(const Shape& y) { return y[1] * y[2] * y[3]; }

// From one image's codes to the next's, for `windows` pooled windows an image.
int64_t code_image_bytes(int64_t windows) { return 4 * kir::pool_code_words(windows); }

}  // namespace

float* ConvEpilogue::image_out(const View& y, int64_t i) const {
  // Slot 3: the one a 16-bit result uses, which a pooled result (f32) never is.
  return pools() ? conv_scratch(3, image_elements(y.shape)) : cpujit::image_out(y, i, image_elements(y.shape), 3);
}

void ConvEpilogue::image_done(const View& y, int64_t i, const float* written) const {
  const int64_t elements = image_elements(y.shape);
  if (!pools()) return cpujit::image_done(y, i, elements, written);
  const int64_t pooled_image = elements / 4;
  max_pool2x2_with_codes(written, y.shape[1], y.shape[2], y.shape[3], pooled + i * pooled_image,
                         codes + i * code_image_bytes(pooled_image), pool_level);
}

void ConvEpilogue::pool_pixels(const float* pixels, int64_t oh, int64_t ow, int64_t channels, int64_t ld,
                               int64_t i) const {
  const int64_t points = oh / 2 * (ow / 2), image = channels * points;
  // The values, the codes, then the codes transposed.
  float* pooled_pixels = conv_scratch(3, 2 * points * ld + image);
  int32_t* code_pixels = reinterpret_cast<int32_t*>(pooled_pixels + points * ld);
  int32_t* image_codes = code_pixels + points * ld;
  max_pool2x2_pixels_with_codes(pixels, oh, ow, channels, ld, bias_from(0), relu(), pooled_pixels, code_pixels);
  transpose_floats(pooled_pixels, points, channels, ld, pooled + i * image, points);
  // The codes' bits moved as floats (the transpose only shuffles, loads and stores them), then
  // narrowed to bytes in place.
  transpose_floats(reinterpret_cast<const float*>(code_pixels), points, channels, ld,
                   reinterpret_cast<float*>(image_codes), points);
  narrow_codes(image_codes, image, codes + i * code_image_bytes(image));
}

void ConvEpilogue::prefetch(const View& y, int64_t i, int64_t part, int64_t parts) const {
  const int64_t elements = image_elements(y.shape);
  if (!pools()) return prefetch_image(y, i, elements, part, parts);
  prefetch_image({y.shape, pooled, DType::f32}, i, elements / 4, part, parts);
  prefetch_bytes(codes, code_image_bytes(elements / 4), i, part, parts);
}

}  // namespace towerjit::cpujit
