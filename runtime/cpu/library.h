// The CPU's library routines: what the kernel IR leaves to hand-written code rather than
// generated loops. Matrix products go to OpenBLAS's sgemm, split over the pool (gemm.h);
// convolutions to the direct kernels or im2col + sgemm (conv.h); pools (pool.h), one-hot,
// argmax, pad and concat are plain loops.
#pragma once

#include <vector>

#include "dsl/graph.h"
#include "jit/cpu/cpu_isa.h"
#include "jit/kir/kernel_ir.h"
#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// A 2x2 max pool's gradient that no step stores, routed from the winners' codes as a
// convolution's gradient reads it (jit/passes/conv_pools.h): dx [N, C, H, W] is dy [N, C, H/2,
// W/2] at each window's coded position (with `relu_mask`, only at codes below 4), +0 elsewhere.
// The codes are a byte a window, an image's from a multiple of 4 bytes on
// (kir::pool_code_words): pool.h's routed_by_codes makes one from the buffers.
struct RoutedPoolGradient {
  const uint8_t* codes;
  const float* dy;
  int64_t images = 0;
  int64_t image_rows = 0;   // pooled rows an image (C * H/2)
  int64_t image_bytes = 0;  // from one image's codes to the next's
  bool relu_mask = false;
  CpuIsa level = CpuIsa::baseline;  // the vector level of the routing's row kernels
};

// A buffer as a library routine sees it: its bound shape and its elements.
struct View {
  Shape shape;  // concrete
  void* data;
  DType dtype = DType::f32;
  // Not null: an f32 pool gradient routed as it is read (conv_images.h); `data` is null.
  const RoutedPoolGradient* routed = nullptr;
  float* f() const { return static_cast<float*>(data); }
  int32_t* i() const { return static_cast<int32_t*>(data); }
  uint16_t* h() const { return static_cast<uint16_t*>(data); }  // bf16 / f16 bit patterns
};

// Runs one library call. `node` is the graph node it computes (for error locations); `codes`:
// a pooling convolution's second output (kir::LibraryCall::codes), else empty.
void run_library_call(const kir::LibraryCall& call, const Node& node, const std::vector<View>& inputs,
                      const View& output, ThreadPool* pool, const View& codes = {});

}  // namespace towerjit::cpujit
