// The GEMM floor of a compiled step: the sgemm calls its library steps make (matrix products,
// and the im2col GEMMs of convolutions and their gradients), each timed alone through
// sgemm on exactly its shape, through OpenBLAS's own threads and as towerjit makes it (its
// kernel choice, split over its pool), the faster of the two. The sum is the time the step could not go below without
// a faster GEMM.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "jit/kir/kernel_ir.h"
#include "runtime/thread_pool.h"

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
  double openblas_ms = 0;  // the step's `count` calls through OpenBLAS's own threads
  double split_ms = 0;     // the same calls the way towerjit makes them (runtime/cpu/gemm.h)
  double total_ms() const { return std::min(openblas_ms, split_ms); }
};

// Times each shape both ways (median of `repeats` samples, each enough calls to time), on
// random operands; the floor takes the faster.
std::vector<GemmTiming> time_gemms(const std::vector<GemmShape>& shapes, ThreadPool& pool, int repeats = 9);

// The machine's sgemm peak, GFLOP/s: a 1024^3 product through cpujit::sgemm (the packed kernel
// at AVX-512, OpenBLAS below; runtime/cpu/gemm.h) on one thread, and split over the pool's
// threads as towerjit splits products (the best of 5 samples each).
struct SgemmPeak {
  double one_thread = 0, pool = 0;
};
SgemmPeak sgemm_peak(ThreadPool& pool);
// One sample of the pool's rate (one product after a warm-up): the roof measured beside one
// profiled step, so that the step and its roof see the same stretch of a shared machine, and
// one sample stands against one step (a best of several would favour the roof).
double sgemm_pool_sample(ThreadPool& pool);
// Each field's larger value.
inline SgemmPeak best_of(const SgemmPeak& a, const SgemmPeak& b) {
  return {std::max(a.one_thread, b.one_thread), std::max(a.pool, b.pool)};
}

}  // namespace towerjit::bench
