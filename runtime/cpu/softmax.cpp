#include "runtime/cpu/softmax.h"

#include <algorithm>
#include <cstring>

#include "runtime/cpu/conv.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/lane_sum.h"
#include "runtime/cpu/vector_exp.h"

// The arithmetic is the sequence jit/reference/eval_norm.cpp bounds: m = max(x), e = exp(x - m)
// (written into the output row), s = sum(e), y = e * (1 / s); backward t = sum(y dy),
// dx = y (dy - t). Maxima and sums run in kLanes interleaved lanes combined in a fixed tree, so
// the compiler vectorises them without reordering a float operation: the bits do not depend on
// the vector width. Each routine is compiled for the build's target and for AVX2 + FMA, as
// runtime/cpu/layer_norm.cpp's are.
#define TJ_INLINE inline __attribute__((always_inline))

namespace towerjit::cpujit {
namespace {

constexpr int64_t kRowBlock = 16;  // rows a task takes at a time

struct Operands {
  const float *x, *dy;  // forward: x; backward: x is y
  float* out;
  int64_t rows, n;
};

// The row's maximum, NaN if an element is one, in eight lanes of GCC's vector types (a
// compare and a blend each: GCC's vectoriser leaves a scalar compare-and-select reduction
// alone). The lanes also sum v * 0, which is NaN only where some v is NaN or infinite: only
// such a row is searched for a NaN. Exact in any order.
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));

TJ_INLINE float row_max(const float* __restrict x, int64_t n) {
  Lanes acc = Lanes{} + x[0], zeros = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    Lanes v;
    std::memcpy(&v, x + j, sizeof v);
    acc = v > acc ? v : acc;
    zeros += v * 0.0f;
  }
  float m = acc[0], zero = 0.0f;
  for (int l = 0; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m, zero += zeros[l];
  for (; j < n; ++j) m = x[j] > m ? x[j] : m, zero += x[j] * 0.0f;
  if (zero == 0.0f) return m;
  for (j = 0; j < n; ++j)
    if (x[j] != x[j]) return x[j];
  return m;
}

TJ_INLINE void forward_rows(const Operands& o, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict x = o.x + r * o.n;
    float* __restrict y = o.out + r * o.n;
    const float m = row_max(x, o.n);
    // exp on whole vectors (a loop of the scalar vector_exp stays scalar), then the row's last
    // few; summed in lane_sum's lanes and order.
    const int64_t whole = o.n / kLanes * kLanes;
    for (int64_t j = 0; j < o.n; ++j) y[j] = x[j] - m;
    vector_exp_in_place(y, whole);
    for (int64_t j = whole; j < o.n; ++j) y[j] = vector_exp(y[j]);
    const float inv = 1.0f / lane_sum(o.n, [&](int64_t j) { return y[j]; });
    for (int64_t j = 0; j < o.n; ++j) y[j] *= inv;
  }
}

TJ_INLINE void grad_rows(const Operands& o, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict y = o.x + r * o.n;
    const float* __restrict dy = o.dy + r * o.n;
    float* __restrict dx = o.out + r * o.n;
    const float t = lane_sum(o.n, [&](int64_t j) { return y[j] * dy[j]; });
    for (int64_t j = 0; j < o.n; ++j) dx[j] = y[j] * (dy[j] - t);
  }
}

TJ_INLINE void run_items(const Operands& o, bool backward, int64_t begin, int64_t end) {
  for (int64_t item = begin; item < end; ++item) {
    const int64_t r0 = item * kRowBlock, r1 = std::min(o.rows, r0 + kRowBlock);
    if (backward) grad_rows(o, r0, r1);
    else forward_rows(o, r0, r1);
  }
}

void run_items_generic(const Operands& o, bool backward, int64_t begin, int64_t end) {
  run_items(o, backward, begin, end);
}
TOWERJIT_TARGET_AVX2 void run_items_avx2(const Operands& o, bool backward, int64_t begin, int64_t end) {
  run_items(o, backward, begin, end);
}

void run(const std::vector<View>& in, const View& out, ThreadPool* pool, bool backward) {
  const Shape& xs = in[0].shape;
  const int64_t n = xs[xs.rank() - 1];
  const Operands o{in[0].f(), backward ? in[1].f() : nullptr, out.f(), n == 0 ? 0 : xs.elements(0) / n, n};
  const bool avx2 = isa_allows(CpuIsa::avx2);  // asked once: it reads the environment
  parallel(pool, (o.rows + kRowBlock - 1) / kRowBlock, [&](int64_t begin, int64_t end) {
    if (avx2) run_items_avx2(o, backward, begin, end);
    else run_items_generic(o, backward, begin, end);
  });
}

}  // namespace

void softmax(const std::vector<View>& in, const View& out, ThreadPool* pool) { run(in, out, pool, false); }
void softmax_grad(const std::vector<View>& in, const View& out, ThreadPool* pool) { run(in, out, pool, true); }

}  // namespace towerjit::cpujit
