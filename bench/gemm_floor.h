// The GEMM floor of a compiled step: the sgemm calls its library steps make (matrix products,
// and the im2col GEMMs of convolutions and their gradients), each timed alone through
// cblas_sgemm on exactly its shape. The sum is the time the step could not go below without
// a faster GEMM.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jit/kir/kernel_ir.h"

namespace towerjit::bench {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  int64_t count = 1;    // calls per step with this shape (convolutions: one per image)
  std::string op;       // MatMul, Conv2D, Conv2DGradInput, Conv2DGradFilter
  double flops() const { return 2.0 * m * n * k * count; }
};

// The sgemm calls the CPU library makes for `program` at `batch`, as runtime/cpu/library.cpp
// issues them.
std::vector<GemmShape> gemm_shapes(const kir::Program& program, int64_t batch);

struct GemmTiming {
  GemmShape shape;
  double call_ms = 0;  // median time of one call
  double total_ms() const { return call_ms * shape.count; }
};

// Times each shape with cblas_sgemm (median of `repeats` samples, each a batch of calls long
// enough to time), on random operands.
std::vector<GemmTiming> time_gemms(const std::vector<GemmShape>& shapes, int repeats = 9);

}  // namespace towerjit::bench
