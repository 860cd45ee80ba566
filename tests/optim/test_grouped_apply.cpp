// Grouped applies (jit/passes/group_kernels.h): every variable's update runs in one group
// kernel over the variables' concatenated points. Variables at odd sizes (1, 7, 127 and a
// [7,127] matrix) put part boundaries everywhere a vector loop or a thread's share could end;
// the CPU JIT must match the reference interpreter after each step, for every optimiser.
#include "optim_util.h"

namespace {

using namespace optim_test;

// loss = sum over variables of sum(0.5 * w^2 * a + b * w), a and b fed: dloss/dw = a * w + b.
struct OddSizes {
  tj::Graph graph;
  tj::Tensor loss;
  tj::reference::Feeds feeds;

  OddSizes(const tj::Optimizer& opt, std::vector<tj::Shape> shapes) {
    tj::GraphScope use(graph);
    std::vector<tj::Tensor> vars;
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> pos(0.5, 2.0), any(-1.0, 1.0);
    for (size_t i = 0; i < shapes.size(); ++i) {
      const std::string name = "v" + std::to_string(i);
      auto w = tj::variable(name, shapes[i], {.init = tj::init::uniform(-1, 1)});
      auto a = tj::input(name + ":a", shapes[i]), b = tj::input(name + ":b", shapes[i]);
      tj::Tensor term = tj::sum(0.5 * a * w * w + b * w);
      loss = loss.valid() ? loss + term : term;
      tj::reference::Array fa(shapes[i]), fb(shapes[i]);
      for (double& x : fa.data) x = static_cast<float>(pos(rng));
      for (double& x : fb.data) x = static_cast<float>(any(rng));
      feeds[name + ":a"] = fa, feeds[name + ":b"] = fb;
      vars.push_back(w);
    }
    opt.apply(tj::grad(loss, vars), vars);
  }
};

// The program's apply: the group kernel with the most parts.
size_t largest_group(const tj::CpuProgram& program) {
  size_t n = 0;
  for (const auto& k : program.program().kernels) n = std::max(n, k.parts.size());
  return n;
}

}  // namespace

TEST_CASE("grouped applies at odd sizes match the reference interpreter for every optimiser", "[optim][jit]") {
  const std::vector<std::pair<std::string, tj::Optimizer>> optimizers = {
      {"sgd", tj::sgd(0.1, {.weight_decay = 0.05})},
      {"momentum", tj::momentum(0.1, 0.9)},
      {"nesterov", tj::momentum(0.1, 0.8, {.nesterov = true, .weight_decay = 0.01})},
      {"adam", tj::adam(0.05)},
      {"adamw", tj::adamw(0.05, {.weight_decay = 0.5})},
      {"rmsprop", tj::rmsprop(0.01, {.alpha = 0.9, .momentum = 0.5, .centered = true})},
      {"adagrad", tj::adagrad(0.1, {.lr_decay = 0.1, .initial_accumulator = 0.5})},
  };
  for (const auto& [what, opt] : optimizers) {
    OddSizes p(opt, {{1}, {7}, {127}, {7, 127}});
    tj::CpuProgram program(p.graph, {p.loss}, /*run_update_ops=*/true);
    INFO(what << "\n" << tj::kir::to_string(program.program()));
    CHECK(largest_group(program) >= 4);  // one part per variable at least
    run_steps(p.graph, p.loss, p.feeds, 3, [&](int, const State&, const State&) {});  // bounds per step
  }
}

TEST_CASE("a grouped apply split over threads gives the bits of one thread", "[optim][jit]") {
  // 40,000 + 127 + 7 points: above the size at which the CPU backend splits a kernel's range
  // over threads, with part boundaries inside the shares.
  OddSizes p(tj::adam(0.05), {{200, 200}, {127}, {7}});
  tj::HostFeeds feeds;
  for (const auto& [name, a] : p.feeds) feeds[name] = to_host(a);
  tj::HostVariables one, two;
  for (const auto& [name, a] : tj::reference::initialize_variables(p.graph, 1)) one[name] = two[name] = to_host(a);
  tj::ThreadPool threads(3);
  tj::CpuProgram serial(p.graph, {p.loss}, true), parallel(p.graph, {p.loss}, true, &threads);
  REQUIRE(largest_group(serial) >= 3);
  for (int k = 0; k < 2; ++k) serial.run(feeds, one, k), parallel.run(feeds, two, k);
  for (const auto& [name, t] : one) {
    INFO(name);
    CHECK(t.f32 == two.at(name).f32);
  }
}
