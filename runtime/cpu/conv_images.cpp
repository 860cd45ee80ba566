#include "runtime/cpu/conv_images.h"

#include <immintrin.h>

#include "runtime/cpu/conv.h"
#include "runtime/cpu/conv_geometry.h"
#include "runtime/cpu/half_spans.h"
#include "runtime/cpu/pool.h"

namespace towerjit::cpujit {

namespace {

// Routes `images` images of a routed pool gradient from image i on into `to`.
void route_images(const View& v, int64_t i, int64_t images, float* to) {
  const int64_t ow = v.shape[3] / 2, rows = v.shape[1] * v.shape[2] / 2;  // pooled rows an image
  route_pool_rows(*v.routed, i * rows, images * rows, ow, to, 2 * ow);
}

}  // namespace

const float* image_in(const View& v, int64_t i, int64_t elements, int slot) {
  if (v.routed) {
    float* to = conv_scratch(slot, elements);
    route_images(v, i, 1, to);
    return to;
  }
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
  if (v.routed) {  // what the routing reads: the codes and dy, a quarter of the image
    prefetch_bytes(v.routed->codes, v.routed->image_bytes, i, part, parts);
    prefetch_image({v.shape, const_cast<float*>(v.routed->dy), DType::f32}, i, elements / 4, part, parts);
    return;
  }
  prefetch_bytes(v.data, elements * dtype_bytes(v.dtype), i, part, parts);
}

void prefetch_bytes(const void* data, int64_t bytes, int64_t i, int64_t part, int64_t parts) {
  const char* image = static_cast<const char*>(data) + i * bytes;
  constexpr int64_t kLine = 64;
  for (int64_t at = bytes * part / parts / kLine * kLine, end = bytes * (part + 1) / parts; at < end; at += kLine)
    _mm_prefetch(image + at, _MM_HINT_T1);
}

View in_memory(const View& v, std::vector<float>& keep, ThreadPool* pool) {
  if (!v.routed) return v;
  keep.resize(static_cast<size_t>(v.shape.elements(0)));
  const int64_t image = v.shape[1] * v.shape[2] * v.shape[3];
  parallel(pool, v.shape[0], [&](int64_t begin, int64_t end) { route_images(v, begin, end - begin, keep.data() + begin * image); });
  return {v.shape, keep.data(), DType::f32};
}

const float* as_floats(const View& v, std::vector<float>& keep) {
  if (v.dtype == DType::f32) return v.f();
  keep.resize(static_cast<size_t>(v.shape.elements(0)));
  widen_span(v.h(), keep.data(), static_cast<int64_t>(keep.size()), v.dtype);
  return keep.data();
}

}  // namespace towerjit::cpujit
