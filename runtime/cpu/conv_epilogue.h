// A convolution's epilogue on the CPU (kir::Epilogue, jit/passes/epilogues.h): act(y + bias[o])
// on each output as the convolution stores it. It replaces a loop kernel that read and wrote
// the whole output from memory after the convolution. The narrow kernels apply it to their
// accumulators before the store (narrow_conv.cpp), the direct ones as they transpose an image's
// output into NCHW (transpose.h); im2col + sgemm to each image's output after the product.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "jit/kir/kernel_ir.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/library.h"

namespace towerjit::cpujit {

struct ConvEpilogue {
  kir::Epilogue kind = kir::Epilogue::none;
  const float* bias = nullptr;  // [O], f32
  // A 2x2, stride-2 max pool after act (jit/passes/conv_pools.h): each image's result is
  // written to this thread's scratch and pooled from there, while it is in cache, into `pooled`
  // and `codes` ([O, OH/2, OW/2] an image, a byte each, each image's from a multiple of 4
  // bytes on: kir::pool_code_words); y itself is never written (its data is null). Null: no
  // pool.
  float* pooled = nullptr;
  uint8_t* codes = nullptr;
  CpuIsa pool_level = CpuIsa::baseline;  // the vector level of the pool's row kernels

  bool pools() const { return pooled != nullptr; }

  // The bias from output channel `o` on, or null for none; whether a ReLU follows.
  const float* bias_from(int64_t o) const { return kind == kir::Epilogue::none ? nullptr : bias + o; }
  bool relu() const { return kind == kir::Epilogue::bias_relu; }

  // image[o][p] = act(image[o][p] + bias[o]) for o < channels, p < spatial: the same float
  // operations as the loop kernel it replaced (the add, then the DSL's relu: x <= 0 gives 0,
  // NaN stays NaN). Nothing for none.
  void apply(float* image, int64_t channels, int64_t spatial) const;

  // Where the kernels write image i of y [N, O, OH, OW] in f32: y's own place (conv_images.h's
  // image_out), or with a pool, scratch.
  float* image_out(const View& y, int64_t i) const;
  // Once they have: a 16-bit image rounded into y (image_done), or the scratch pooled.
  void image_done(const View& y, int64_t i, const float* written) const;
  // Asks the caches for slice `part` of `parts` of where image i's results go (prefetch_image).
  void prefetch(const View& y, int64_t i, int64_t part, int64_t parts) const;
  // With a pool, a direct convolution's image i before its transpose, [oh*ow][ld] (channels
  // along the rows): act, pooled there, and only the pooled values and codes transposed into
  // place (a quarter of the result each). Needs AVX2.
  void pool_pixels(const float* pixels, int64_t oh, int64_t ow, int64_t channels, int64_t ld, int64_t i) const;
};

// The DSL's relu on a vector's lanes: those <= 0 (either zero included) become +0, and NaN
// stays NaN (the ordered compare is false for it), as in the loop kernel.
TOWERJIT_TARGET_AVX2 inline __m256 relu8(__m256 v) {
  return _mm256_andnot_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LE_OQ), v);
}
TOWERJIT_TARGET_AVX512 inline __m512 relu16(__m512 v) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NLE_UQ), v);
}

}  // namespace towerjit::cpujit
