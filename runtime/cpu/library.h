// The CPU's library routines: what the kernel IR leaves to hand-written code rather than
// generated loops. Matrix products go to OpenBLAS's sgemm, split over the pool (gemm.h);
// convolutions to the direct kernels or im2col + sgemm (conv.h); pools (pool.h), one-hot,
// argmax, pad and concat are plain loops.
#pragma once

#include <vector>

#include "dsl/graph.h"
#include "jit/kir/kernel_ir.h"
#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// A buffer as a library routine sees it: its bound shape and its elements.
struct View {
  Shape shape;  // concrete
  void* data;
  DType dtype = DType::f32;
  float* f() const { return static_cast<float*>(data); }
  int32_t* i() const { return static_cast<int32_t*>(data); }
  uint16_t* h() const { return static_cast<uint16_t*>(data); }  // bf16 / f16 bit patterns
};

// Runs one library call. `node` is the graph node it computes (for error locations); `codes`:
// a pooling convolution's second output (kir::LibraryCall::codes), else empty.
void run_library_call(const kir::LibraryCall& call, const Node& node, const std::vector<View>& inputs,
                      const View& output, ThreadPool* pool, const View& codes = {});

}  // namespace towerjit::cpujit
