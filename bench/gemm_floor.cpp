#include "bench/gemm_floor.h"

#include "runtime/cpu/blas.h"
#include "runtime/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <functional>
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
      if (c.sum_batches)  // one product, its batches stacked along k (jit/passes/fold_batch_sums.h)
        for (int i = 0; i < ra - 2; ++i) g.k *= a[i];
    } else if (c.op == Op::Conv2D || c.op == Op::Conv2DGradInput || c.op == Op::Conv2DGradFilter) {
      // Conv2D (x, w) -> y; GradInput (dy, w) -> dx; GradFilter (x, dy) -> dw.
      const Shape x = c.op == Op::Conv2DGradInput ? shape(c.output) : shape(c.inputs[0]);
      const Shape w = c.op == Op::Conv2D ? shape(c.inputs[1])
                      : c.op == Op::Conv2DGradInput ? shape(c.inputs[1]) : shape(c.output);
      const Shape y = kir::conv_result_shape(c.op == Op::Conv2D ? shape(c.output)
                                             : c.op == Op::Conv2DGradInput ? shape(c.inputs[0]) : shape(c.inputs[1]), c);
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

using clock = std::chrono::steady_clock;

// Median over `repeats` samples of one run of `work`, each sample enough runs for about 2 ms.
double median_ms(const std::function<void()>& work, int repeats) {
  work();
  const auto t0 = clock::now();
  work();
  const double one = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  const int per_sample = std::max(1, std::min(10000, static_cast<int>(2.0 / std::max(one, 1e-6))));
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    const auto start = clock::now();
    for (int i = 0; i < per_sample; ++i) work();
    samples.push_back(std::chrono::duration<double, std::milli>(clock::now() - start).count() / per_sample);
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

GemmTiming time_one(const GemmShape& g, ThreadPool& pool, int repeats) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> a(g.m * g.k), b(g.k * g.n), c(g.m * g.n);
  for (float& v : a) v = dist(rng);
  for (float& v : b) v = dist(rng);
  const int64_t lda = g.transpose_a ? g.m : g.k, ldb = g.transpose_b ? g.k : g.n;
  auto product = [&](ThreadPool* split) {
    cpujit::sgemm(split, g.transpose_a, g.transpose_b, g.m, g.n, g.k, a.data(), lda, b.data(), ldb, 0.0f,
                  c.data(), g.n);
  };
  GemmTiming t{g};
  // The step's `count` calls through OpenBLAS's own threads, one after another (OpenBLAS itself,
  // not cpujit::sgemm, which at AVX-512 takes most products to its own kernels).
  const cpujit::Blas& blas = cpujit::blas();
  if (blas.set_threads) blas.set_threads(blas.threads);
  t.openblas_ms = median_ms([&] {
    for (int64_t i = 0; i < g.count; ++i)
      blas.sgemm(CblasRowMajor, g.transpose_a ? CblasTrans : CblasNoTrans, g.transpose_b ? CblasTrans : CblasNoTrans,
                 static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), 1.0f, a.data(),
                 static_cast<int>(lda), b.data(), static_cast<int>(ldb), 0.0f, c.data(), static_cast<int>(g.n));
  }, repeats);
  if (blas.set_threads) blas.set_threads(1);
  // The same calls as towerjit makes them: single-threaded products (its own kernels or
  // OpenBLAS, as runtime/cpu/gemm.h picks), spread over the pool by call when there are enough of
  // them, else each split.
  t.split_ms = median_ms([&] {
    if (g.count >= pool.size())
      pool.parallel_for(g.count, [&](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) product(nullptr);
      });
    else
      for (int64_t i = 0; i < g.count; ++i) product(&pool);
  }, repeats);
  return t;
}

// The best of `samples` 1024^3 products through cpujit::sgemm (after one warm-up), GFLOP/s;
// `split` null for one thread.
double sgemm_gflops(ThreadPool* split, int samples) {
  const int64_t n = 1024;
  static const std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f);
  std::vector<float> c(n * n);
  double best_ms = 1e30;
  for (int r = 0; r <= samples; ++r) {
    const auto t0 = clock::now();
    cpujit::sgemm(split, false, false, n, n, n, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    if (r > 0) best_ms = std::min(best_ms, ms);
  }
  return 2.0 * n * n * n / (best_ms * 1e6);
}

}  // namespace

std::vector<GemmTiming> time_gemms(const std::vector<GemmShape>& shapes, ThreadPool& pool, int repeats) {
  std::vector<GemmTiming> out;
  for (const GemmShape& g : shapes) out.push_back(time_one(g, pool, repeats));
  return out;
}

SgemmPeak sgemm_peak(ThreadPool& pool) { return {sgemm_gflops(nullptr, 5), sgemm_gflops(&pool, 5)}; }

double sgemm_pool_sample(ThreadPool& pool) { return sgemm_gflops(&pool, 1); }

}  // namespace towerjit::bench
