#include "runtime/cpu/layer_norm.h"

#include <algorithm>
#include <cmath>

#include "runtime/cpu/conv.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/lane_sum.h"

// Row sums run in lanes (lane_sum.h), so the result is the same at every vector width. Each
// routine is compiled twice, for the build's target and for AVX2 + FMA (where the CPU has it),
// as runtime/cpu/attention.cpp's are. The arithmetic is the sequence jit/reference/eval_norm.cpp
// bounds: mean, centred squares, rstd = 1 / sqrt(var + eps), xhat = (x - mean) rstd, ...
#define TJ_INLINE inline __attribute__((always_inline))

namespace towerjit::cpujit {
namespace {

constexpr int64_t kRowBlock = 16;   // rows a task takes at a time (forward, d x)
constexpr int64_t kParamRows = 64;  // rows of one partial sum of d gain and d bias

struct Operands {
  const float *x, *gain, *bias, *dy;
  float* out;
  int64_t rows, n;
  float eps;
  bool rms;
};

struct Stats {
  float mean, rstd;
};

// Two passes over the row (it is in L1 for the second): the mean, then the mean square of the
// centred values, which does not cancel as mean(x^2) - mean(x)^2 would. rms: no centring.
TJ_INLINE Stats row_stats(const Operands& o, const float* __restrict x) {
  const float n = static_cast<float>(o.n);
  const float mean = o.rms ? 0.0f : lane_sum(o.n, [&](int64_t j) { return x[j]; }) / n;
  const float var = lane_sum(o.n, [&](int64_t j) {
                      const float d = x[j] - mean;
                      return d * d;
                    }) / n;
  return {mean, 1.0f / std::sqrt(var + o.eps)};
}

TJ_INLINE void forward_rows(const Operands& o, int64_t r0, int64_t r1) {
  const float* __restrict gain = o.gain;
  const float* __restrict bias = o.bias;
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict x = o.x + r * o.n;
    float* __restrict y = o.out + r * o.n;
    const Stats s = row_stats(o, x);
    if (o.rms)
      for (int64_t j = 0; j < o.n; ++j) y[j] = (x[j] - s.mean) * s.rstd * gain[j];
    else
      for (int64_t j = 0; j < o.n; ++j) y[j] = (x[j] - s.mean) * s.rstd * gain[j] + bias[j];
  }
}

// d x = rstd ((g - mean(g)) - xhat mean(g xhat)), g = dy gain (rms: without mean(g)).
TJ_INLINE void grad_input_rows(const Operands& o, int64_t r0, int64_t r1) {
  const float* __restrict gain = o.gain;
  const float n = static_cast<float>(o.n);
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict x = o.x + r * o.n;
    const float* __restrict dy = o.dy + r * o.n;
    float* __restrict dx = o.out + r * o.n;
    const Stats s = row_stats(o, x);
    const float s1 = o.rms ? 0.0f : lane_sum(o.n, [&](int64_t j) { return dy[j] * gain[j]; });
    const float s2 = lane_sum(o.n, [&](int64_t j) { return (dy[j] * gain[j]) * ((x[j] - s.mean) * s.rstd); });
    const float m1 = s1 / n, m2 = s2 / n;
    for (int64_t j = 0; j < o.n; ++j) {
      const float xhat = (x[j] - s.mean) * s.rstd;
      dx[j] = s.rstd * ((dy[j] * gain[j] - m1) - xhat * m2);
    }
  }
}

// Block `block`'s partial sums over its rows, in row order: [d gain | d bias] of n each.
TJ_INLINE void param_block(const Operands& o, int64_t block, float* __restrict part) {
  const int64_t width = o.rms ? o.n : 2 * o.n;
  std::fill(part, part + width, 0.0f);
  const int64_t r1 = std::min(o.rows, (block + 1) * kParamRows);
  for (int64_t r = block * kParamRows; r < r1; ++r) {
    const float* __restrict x = o.x + r * o.n;
    const float* __restrict dy = o.dy + r * o.n;
    const Stats s = row_stats(o, x);
    for (int64_t j = 0; j < o.n; ++j) part[j] += dy[j] * ((x[j] - s.mean) * s.rstd);
    if (!o.rms)
      for (int64_t j = 0; j < o.n; ++j) part[o.n + j] += dy[j];
  }
}

enum class Pass { forward, grad_input, grad_params };

TJ_INLINE void run_items(const Operands& o, Pass pass, int64_t begin, int64_t end, float* partials) {
  for (int64_t item = begin; item < end; ++item) {
    if (pass == Pass::grad_params) {
      param_block(o, item, partials + item * (o.rms ? o.n : 2 * o.n));
      continue;
    }
    const int64_t r0 = item * kRowBlock, r1 = std::min(o.rows, r0 + kRowBlock);
    if (pass == Pass::forward) forward_rows(o, r0, r1);
    else grad_input_rows(o, r0, r1);
  }
}

void run_items_generic(const Operands& o, Pass pass, int64_t begin, int64_t end, float* partials) {
  run_items(o, pass, begin, end, partials);
}
TOWERJIT_TARGET_AVX2 void run_items_avx2(const Operands& o, Pass pass, int64_t begin, int64_t end, float* partials) {
  run_items(o, pass, begin, end, partials);
}

void run(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool, Pass pass) {
  const Shape& xs = in[0].shape;
  const int64_t n = xs[xs.rank() - 1];
  Operands o{in[0].f(), nullptr, nullptr, nullptr, out.f(), n == 0 ? 0 : xs.elements(0) / n, n,
             static_cast<float>(at.value), at.rms};
  if (pass == Pass::grad_params) o.dy = in[1].f();
  else o.gain = in[1].f();
  if (pass == Pass::forward && !at.rms) o.bias = in[2].f();
  if (pass == Pass::grad_input) o.dy = in[2].f();
  const int64_t width = at.rms ? n : 2 * n;
  const bool avx2 = isa_allows(CpuIsa::avx2);  // asked once: it reads the environment
  const int64_t block = pass == Pass::grad_params ? kParamRows : kRowBlock;
  const int64_t items = (o.rows + block - 1) / block;
  std::vector<float> partials(pass == Pass::grad_params ? items * width : 0);
  parallel(pool, items, [&](int64_t begin, int64_t end) {
    if (avx2) run_items_avx2(o, pass, begin, end, partials.data());
    else run_items_generic(o, pass, begin, end, partials.data());
  });
  if (pass != Pass::grad_params) return;
  // The blocks' partial sums, added in block order whatever thread computed each.
  std::fill(out.f(), out.f() + width, 0.0f);
  for (int64_t b = 0; b < items; ++b)
    for (int64_t k = 0; k < width; ++k) out.f()[k] += partials[b * width + k];
}

}  // namespace

void layer_norm(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool) {
  run(at, in, out, pool, Pass::forward);
}
void layer_norm_grad_input(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool) {
  run(at, in, out, pool, Pass::grad_input);
}
void layer_norm_grad_params(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool) {
  run(at, in, out, pool, Pass::grad_params);
}

}  // namespace towerjit::cpujit
