// towerjit_conv_bench: the CPU convolutions of the bench's cnn and resnet-bn (3x3, pad 1, batch
// 128) against sgemm, each op timed alone at the level TOWERJIT_CPU_ISA sets. Two measures:
// with the thread pool in wall time (what the training step sees), and on one thread in that
// thread's CPU time (time it was not running does not count, so on a shared machine the
// kernels' rate against the sgemm peak measured the same way swings far less than wall time;
// contention for caches and memory still counts). One JSON line per layer and pass, best of
// `--repeats` (default 5). `--buffers N` (default 1) gives each call the next of N copies of
// the tensors, so that with N of 8 or more they come from memory, as in a training step where
// other layers ran in between, rather than from the caches the previous call left them in.
// `--layer TEXT` times only the layers whose names contain TEXT ("conv1"). Layers of even size
// also time what the cnn's steps run (jit/passes/conv_pools.h): the forward with a 2x2 max pool
// taken in (pooled values and codes written, the result never), and both gradients with their
// dy routed from a pooled dy by those codes.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "jit/cpu/cpu_isa.h"
#include "runtime/cpu/conv.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/pool.h"
#include "runtime/thread_pool.h"

namespace tj = towerjit;

namespace {

double thread_cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

double wall_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The best of `repeats` timings of f after one warm-up call.
double best_ms(const std::function<void()>& f, int repeats, double (*clock)()) {
  f();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = clock();
    f();
    best = std::min(best, clock() - t0);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5, buffers = 1;
  const char* only = "";  // --layer: the layers whose names contain it
  for (int a = 1; a + 1 < argc; a += 2) {
    if (!std::strcmp(argv[a], "--repeats")) repeats = std::atoi(argv[a + 1]);
    if (!std::strcmp(argv[a], "--buffers")) buffers = std::max(1, std::atoi(argv[a + 1]));
    if (!std::strcmp(argv[a], "--layer")) only = argv[a + 1];
  }
  tj::ThreadPool pool;  // one thread per core, as the bench's
  const int64_t n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  auto gemm = [&](tj::ThreadPool* p) {
    return [&, p] { tj::cpujit::sgemm(p, false, false, n, n, n, a.data(), n, b.data(), n, 0.0f, c.data(), n); };
  };
  const double flops = 2.0 * n * n * n;
  const double peak_pool = flops / (best_ms(gemm(&pool), repeats, wall_ms) * 1e6);
  const double peak_one = flops / (best_ms(gemm(nullptr), repeats, thread_cpu_ms) * 1e6);
  std::printf("{\"cpu_isa\":\"%s\",\"threads\":%d,\"buffers\":%d,\"sgemm_peak_gflops\":{\"pool_wall\":%.1f,\"one_thread_cpu\":%.1f}}\n",
              tj::cpujit::isa_name(tj::cpujit::cpu_isa()), pool.size(), buffers, peak_pool, peak_one);
  struct Layer { const char* name; int64_t c, hw, o; };
  const Layer layers[] = {{"1->16 28x28 (conv1)", 1, 28, 16}, {"3->16 32x32 (an RGB first layer)", 3, 32, 16},
                          {"16->16 28x28 (block1)", 16, 28, 16},
                          {"16->32 14x14 (conv2)", 16, 14, 32}, {"32->32 14x14 (block2)", 32, 14, 32}};
  const int64_t batch = 128;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Layer& l : layers) {
    if (!std::strstr(l.name, only)) continue;
    tj::Attrs at;
    at.pad[0] = at.pad[1] = 1;
    std::vector<float> x(batch * l.c * l.hw * l.hw), w(l.o * l.c * 9), y(batch * l.o * l.hw * l.hw), dx(x.size()),
        dw(w.size());
    for (std::vector<float>* v : {&x, &w, &y})
      for (float& e : *v) e = dist(rng);
    std::vector<std::vector<float>> xs(buffers, x), ys(buffers, y), dxs(buffers, dx);
    tj::cpujit::View X{tj::Shape{batch, l.c, l.hw, l.hw}, x.data()}, W{tj::Shape{l.o, l.c, 3, 3}, w.data()},
        Y{tj::Shape{batch, l.o, l.hw, l.hw}, y.data()}, DX{X.shape, dx.data()}, DW{W.shape, dw.data()};
    int turn = 0;
    auto next_buffers = [&] {
      turn = (turn + 1) % buffers;
      X.data = xs[turn].data(), Y.data = ys[turn].data(), DX.data = dxs[turn].data();
    };
    const double f = 2.0 * batch * l.hw * l.hw * l.o * l.c * 9;
    struct Pass { const char* name; std::function<void(tj::ThreadPool*)> run; };
    // The forward again with the bias and ReLU a conv2d layer adds as its epilogue
    // (runtime/cpu/conv_epilogue.h): what the epilogue costs the convolution.
    const std::vector<float> bias(l.o, 0.25f);
    const tj::cpujit::ConvEpilogue bias_relu{tj::kir::Epilogue::bias_relu, bias.data()};
    std::vector<Pass> passes = {
        {"conv2d", [&](tj::ThreadPool* p) { tj::cpujit::conv2d(at, X, W, Y, p); }},
        {"conv2d+bias+relu", [&](tj::ThreadPool* p) { tj::cpujit::conv2d(at, X, W, Y, p, bias_relu); }},
        {"conv2d_grad_filter", [&](tj::ThreadPool* p) { tj::cpujit::conv2d_grad_filter(at, X, Y, DW, p); }},
        {"conv2d_grad_input", [&](tj::ThreadPool* p) { tj::cpujit::conv2d_grad_input(at, Y, W, DX, p); }}};
    // The pooled forward writes pooled values and codes (a quarter of y each); the routed
    // gradients read a pooled dy (y's first quarter, values in [-1, 1]) by those codes.
    const tj::Shape pooled{batch, l.o, l.hw / 2, l.hw / 2};
    const tj::Shape code_words{batch, tj::kir::pool_code_words(l.o * (l.hw / 2) * (l.hw / 2))};
    std::vector<float> pooled_y(pooled.elements(0));
    std::vector<int32_t> codes(code_words.elements(0));
    tj::cpujit::ConvEpilogue pooling = bias_relu;
    pooling.pooled = pooled_y.data(), pooling.codes = reinterpret_cast<uint8_t*>(codes.data());
    pooling.pool_level = tj::cpujit::vector_level(tj::cpujit::cpu_isa());
    const tj::cpujit::View unwritten{Y.shape, nullptr};
    const tj::cpujit::RoutedPoolGradient routing = tj::cpujit::routed_by_codes(
        {code_words, codes.data(), tj::DType::i32}, {pooled, y.data()}, true);
    const tj::cpujit::View routed{Y.shape, nullptr, tj::DType::f32, &routing};
    if (l.hw % 2 == 0) {
      tj::cpujit::conv2d(at, X, W, unwritten, &pool, pooling);
      passes.push_back({"conv2d+bias+relu+maxpool", [&](tj::ThreadPool* p) { tj::cpujit::conv2d(at, X, W, unwritten, p, pooling); }});
      passes.push_back({"conv2d_grad_filter (dy routed)", [&](tj::ThreadPool* p) { tj::cpujit::conv2d_grad_filter(at, X, routed, DW, p); }});
      passes.push_back({"conv2d_grad_input (dy routed)", [&](tj::ThreadPool* p) { tj::cpujit::conv2d_grad_input(at, routed, W, DX, p); }});
    }
    for (const Pass& pass : passes) {
      const double pool_ms = best_ms([&] { next_buffers(); pass.run(&pool); }, repeats, wall_ms);
      const double one_ms = best_ms([&] { next_buffers(); pass.run(nullptr); }, repeats, thread_cpu_ms);
      std::printf("{\"layer\":\"%s\",\"op\":\"%s\",\"pool_wall_ms\":%.3f,\"of_pool_peak\":%.3f,"
                  "\"one_thread_cpu_ms\":%.3f,\"of_one_thread_peak\":%.3f}\n",
                  l.name, pass.name, pool_ms, f / (pool_ms * 1e6) / peak_pool, one_ms, f / (one_ms * 1e6) / peak_one);
    }
  }
}
