// towerjit_activation_bench: the CPU JIT's loop kernels for each activation, forward (y = f(x))
// and gradient (dx = dy f'(x)), over gpt-small's [2048, 256] feed-forward activations (2 MB a
// tensor), at the level TOWERJIT_CPU_ISA sets. Each program runs on one thread and is timed in
// the thread's CPU time (time it was not running does not count, so a shared machine moves the
// figures less), best of `--repeats` (default 7) runs of 20 calls. These kernels are mostly
// polynomial arithmetic an element (exp, erf, tanh), so ns an element is the figure to read; one
// JSON line per activation and direction.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>

#include "bench/best_time.h"
#include "dsl/autodiff.h"
#include "dsl/ops.h"
#include "jit/cpu/cpu_isa.h"
#include "runtime/cpu/cpu_program.h"

namespace tj = towerjit;

int main(int argc, char** argv) {
  int repeats = 7;
  const char* only = "";  // --only NAME: one activation
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats")) repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--only")) only = argv[++i];
  }
  const int64_t rows = 2048, cols = 256, n = rows * cols;
  struct Activation {
    const char* name;
    std::function<tj::Tensor(tj::Tensor)> f;
    std::function<tj::Tensor(tj::Tensor)> slope = {};  // f' written out; empty: grad() derives it
  };
  const Activation activations[] = {
      {"gelu", [](tj::Tensor x) { return tj::gelu(x); }},   {"erf", [](tj::Tensor x) { return tj::erf(x); }},
      {"tanh", [](tj::Tensor x) { return tj::tanh(x); }},   {"sigmoid", [](tj::Tensor x) { return tj::sigmoid(x); }},
      {"softplus", [](tj::Tensor x) { return tj::softplus(x); }}, {"exp", [](tj::Tensor x) { return tj::exp(x); }},
      // gelu with its slope written out of public ops, as its gradient rule had it before the
      // slope became one gelu_grad node (two exps an element): what that node saves.
      {"gelu-composed", [](tj::Tensor x) { return tj::gelu(x); },
       [](tj::Tensor x) { return (tj::erf(x * 0.70710678118654752) + 1.0) * 0.5 + x * tj::exp(x * x * -0.5) * 0.3989422804014327; }},
  };
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.5f);  // pre-activations: both sides of every branch
  tj::HostFeeds feeds;
  for (const char* name : {"x", "dy"}) {
    tj::HostTensor t(tj::Shape{rows, cols});
    for (float& v : t.f32) v = normal(rng);
    feeds[name] = t;
  }
  for (const Activation& a : activations) {
    if (*only && std::strcmp(only, a.name)) continue;
    tj::Graph g;
    tj::GraphScope scope(g);
    tj::Tensor x = tj::input("x", {rows, cols}), dy = tj::input("dy", {rows, cols});
    tj::Tensor y = a.f(x);
    tj::Tensor dx = a.slope ? dy * a.slope(x) : tj::grad(tj::sum(y * dy), {x})[0];
    for (const auto& [direction, fetch] : {std::pair{"forward", y}, std::pair{"gradient", dx}}) {
      tj::CpuProgram program(g, {fetch});  // no pool: one thread
      tj::HostVariables variables;
      const double s = bench::best_seconds([&] { program.run(feeds, variables); }, 20, repeats);
      std::printf("{\"activation\":\"%s\",\"direction\":\"%s\",\"cpu_isa\":\"%s\",\"elements\":%lld,"
                  "\"one_thread_ms\":%.4f,\"ns_per_element\":%.3f}\n",
                  a.name, direction, tj::cpujit::isa_name(tj::cpujit::cpu_isa()), static_cast<long long>(n), s * 1e3,
                  s * 1e9 / n);
    }
  }
}
