#include "runtime/cpu/conv_images.h"

#include <immintrin.h>

#include "runtime/cpu/conv_geometry.h"
#include "runtime/cpu/half_spans.h"

namespace towerjit::cpujit {

const float* image_in(const View& v, int64_t i, int64_t elements, int slot) {
  if (v.dtype == DType::f32) return v.f() + i * elements;
  float* to = conv_scratch(slot, elements);
  widen_span(v.h() + i * elements, to, elements, v.dtype);
  return to;
}

float* image_out(const View& v, int64_t i, int64_t elements, int slot) {
  return v.dtype == DType::f32 ? v.f() + i * elements : conv_scratch(slot, elements);
}

void image_done(const View& v, int64_t i, int64_t elements, const float* written) {
  if (v.dtype != DType::f32) narrow_span(written, v.h() + i * elements, elements, v.dtype);
}

void prefetch_image(const View& v, int64_t i, int64_t elements, int64_t part, int64_t parts) {
  const int64_t bytes = elements * dtype_bytes(v.dtype);
  const char* image = static_cast<const char*>(v.data) + i * bytes;
  constexpr int64_t kLine = 64;
  for (int64_t at = bytes * part / parts / kLine * kLine, end = bytes * (part + 1) / parts; at < end; at += kLine)
    _mm_prefetch(image + at, _MM_HINT_T1);
}

const float* as_floats(const View& v, std::vector<float>& keep) {
  if (v.dtype == DType::f32) return v.f();
  keep.resize(static_cast<size_t>(v.shape.elements(0)));
  widen_span(v.h(), keep.data(), static_cast<int64_t>(keep.size()), v.dtype);
  return keep.data();
}

}  // namespace towerjit::cpujit
