// towerjit_attention_bench: the CPU's fused attention routines (runtime/cpu/attention.h) on
// gpt-small's shape (batch 32, 4 heads, 64 positions, head dimension 16, causal) and on a longer,
// wider one, at the level TOWERJIT_CPU_ISA sets. Each routine is timed on one thread in the
// thread's CPU time (time it was not running does not count, so a shared machine moves the
// figures less), best of `--repeats` (default 7) runs of enough calls for about 20 ms, and on a
// pool of `--threads` (default 2) in wall time, best of the same. FLOPs count the pairs of a
// query and a key it sees: forward 2(d + dv), dq 2(2d + dv), dk and dv 4(d + dv) a pair. One
// JSON line per routine and shape.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "bench/best_time.h"
#include "jit/cpu/cpu_isa.h"
#include "runtime/cpu/attention.h"
#include "runtime/thread_pool.h"

namespace cpujit = towerjit::cpujit;

namespace {

struct Case {
  const char* name;
  int64_t batch, heads, t, d, dv;
};

const Case kCases[] = {
    {"gpt-small", 32, 4, 64, 16, 16},
    {"long and wide", 4, 8, 256, 64, 64},
};

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& v : out) v = u(rng);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 7, threads = 2;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
  }
  towerjit::ThreadPool pool(threads);
  for (const Case& c : kCases) {
    const int64_t problems = c.batch * c.heads;
    using towerjit::Shape;
    const Shape qs{c.batch, c.heads, c.t, c.d}, vs{c.batch, c.heads, c.t, c.dv}, os{c.batch, c.heads, c.t, c.dv + 1};
    std::vector<float> q = random_floats(problems * c.t * c.d, 1), k = random_floats(problems * c.t * c.d, 2),
                       v = random_floats(problems * c.t * c.dv, 3), out(problems * c.t * (c.dv + 1)),
                       dout = random_floats(problems * c.t * (c.dv + 1), 4), dq(problems * c.t * c.d),
                       dkv(problems * c.t * (c.d + c.dv));
    towerjit::Attrs at;
    at.causal = true;
    at.value = 1.0 / std::sqrt(static_cast<double>(c.d));
    const std::vector<cpujit::View> forward_in{{qs, q.data()}, {qs, k.data()}, {vs, v.data()}};
    const std::vector<cpujit::View> backward_in{
        {qs, q.data()}, {qs, k.data()}, {vs, v.data()}, {os, out.data()}, {os, dout.data()}};
    const cpujit::View out_view{os, out.data()}, dq_view{qs, dq.data()},
        dkv_view{Shape{c.batch, c.heads, c.t, c.d + c.dv}, dkv.data()};
    const double pairs = static_cast<double>(problems) * c.t * (c.t + 1) / 2;
    struct Routine {
      const char* name;
      double flops;
      std::function<void(towerjit::ThreadPool*)> call;
    };
    const Routine routines[] = {
        {"attention", pairs * 2 * (c.d + c.dv),
         [&](towerjit::ThreadPool* p) { cpujit::attention(at, forward_in, out_view, p); }},
        {"attention_grad_q", pairs * 2 * (2 * c.d + c.dv),
         [&](towerjit::ThreadPool* p) { cpujit::attention_grad_q(at, backward_in, dq_view, p); }},
        {"attention_grad_kv", pairs * 4 * (c.d + c.dv),
         [&](towerjit::ThreadPool* p) { cpujit::attention_grad_kv(at, backward_in, dkv_view, p); }},
    };
    cpujit::attention(at, forward_in, out_view, nullptr);  // the backward reads a real forward's rows
    for (const Routine& r : routines) {
      const int calls = std::max(1, static_cast<int>(0.02 * 20e9 / r.flops));
      const double one = bench::best_seconds([&] { r.call(nullptr); }, calls, repeats, bench::thread_cpu_s);
      const double many = bench::best_seconds([&] { r.call(&pool); }, calls, repeats, bench::wall_s);
      std::printf("{\"shape\": \"%s\", \"routine\": \"%s\", \"isa\": \"%s\", \"batch\": %lld, \"heads\": %lld, "
                  "\"t\": %lld, \"d\": %lld, \"dv\": %lld, \"one_thread_ms\": %.4f, \"one_thread_gflops\": %.1f, "
                  "\"threads\": %d, \"pool_ms\": %.4f, \"pool_gflops\": %.1f}\n",
                  c.name, r.name, cpujit::isa_name(cpujit::cpu_isa()), static_cast<long long>(c.batch),
                  static_cast<long long>(c.heads), static_cast<long long>(c.t), static_cast<long long>(c.d),
                  static_cast<long long>(c.dv), one * 1e3, r.flops / one / 1e9, threads, many * 1e3,
                  r.flops / many / 1e9);
    }
  }
}
