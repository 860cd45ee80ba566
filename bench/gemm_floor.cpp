#include "bench/gemm_floor.h"

#include <cblas.h>

#include "runtime/cpu/blas.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace towerjit::bench {

std::vector<GemmShape> gemm_shapes(const kir::Program& program, int64_t batch) {
  std::vector<GemmShape> out;
  for (const kir::Step& step : program.steps) {
    if (step.kind != kir::Step::Kind::library) continue;
    const kir::LibraryCall& c = program.calls[step.index];
    auto shape = [&](int buffer) { return program.buffers[buffer].shape.bind(batch); };
    GemmShape g;
    g.op = std::string(op_name(c.op));
    if (c.op == Op::MatMul) {
      const Shape a = shape(c.inputs[0]), o = shape(c.output);
      const int ra = a.rank(), ro = o.rank();
      g.m = o[ro - 2], g.n = o[ro - 1], g.k = c.transpose_a ? a[ra - 2] : a[ra - 1];
      g.transpose_a = c.transpose_a, g.transpose_b = c.transpose_b;
      for (int i = 0; i < ro - 2; ++i) g.count *= o[i];
    } else if (c.op == Op::Conv2D || c.op == Op::Conv2DGradInput || c.op == Op::Conv2DGradFilter) {
      // Conv2D (x, w) -> y; GradInput (dy, w) -> dx; GradFilter (x, dy) -> dw.
      const Shape x = c.op == Op::Conv2DGradInput ? shape(c.output) : shape(c.inputs[0]);
      const Shape w = c.op == Op::Conv2D ? shape(c.inputs[1])
                      : c.op == Op::Conv2DGradInput ? shape(c.inputs[1]) : shape(c.output);
      const Shape y = c.op == Op::Conv2D ? shape(c.output)
                      : c.op == Op::Conv2DGradInput ? shape(c.inputs[0]) : shape(c.inputs[1]);
      const int64_t ckk = x[1] * w[2] * w[3], spatial = y[2] * y[3], filters = w[0];
      g.count = x[0];
      if (c.op == Op::Conv2D) g.m = filters, g.n = spatial, g.k = ckk;
      if (c.op == Op::Conv2DGradInput) g.m = ckk, g.n = spatial, g.k = filters, g.transpose_a = true;
      if (c.op == Op::Conv2DGradFilter) g.m = filters, g.n = ckk, g.k = spatial, g.transpose_b = true;
    } else {
      continue;
    }
    out.push_back(g);
  }
  return out;
}

namespace {

double call_ms(const GemmShape& g, int repeats) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> a(g.m * g.k), b(g.k * g.n), c(g.m * g.n);
  for (float& v : a) v = dist(rng);
  for (float& v : b) v = dist(rng);
  auto call = [&] {
    cpujit::blas().sgemm(CblasRowMajor, g.transpose_a ? CblasTrans : CblasNoTrans,
                g.transpose_b ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 1.0f, a.data(),
                g.transpose_a ? g.m : g.k, b.data(), g.transpose_b ? g.k : g.n, 0.0f, c.data(), g.n);
  };
  using clock = std::chrono::steady_clock;
  call();
  // Calls per sample: enough for about 2 ms, so tiny GEMMs are not lost in clock resolution.
  const auto t0 = clock::now();
  call();
  const double one = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  const int per_sample = std::max(1, std::min(10000, static_cast<int>(2.0 / std::max(one, 1e-6))));
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    const auto start = clock::now();
    for (int i = 0; i < per_sample; ++i) call();
    samples.push_back(std::chrono::duration<double, std::milli>(clock::now() - start).count() / per_sample);
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

std::vector<GemmTiming> time_gemms(const std::vector<GemmShape>& shapes, int repeats) {
  std::vector<GemmTiming> out;
  for (const GemmShape& g : shapes) out.push_back({g, call_ms(g, repeats)});
  return out;
}

}  // namespace towerjit::bench
