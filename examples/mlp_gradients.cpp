// The demo until the trainer lands: a small MLP declared in the DSL, its loss and gradients
// evaluated by the reference interpreter, a few plain SGD steps taken with them, and the same
// loss and gradients from the CPU JIT (fused kernels compiled through LLVM ORC).
//
//   make demo            (or ./build/examples/mlp_gradients)
#include <cmath>
#include <cstdio>

#include "dsl/philox.h"
#include "jit/reference/interpreter.h"
#include "runtime/cpu/cpu_program.h"
#include "towerjit.h"

namespace tj = towerjit;
namespace ref = towerjit::reference;

namespace {

tj::Tensor mlp(tj::Tensor x, int hidden) {
  auto h = tj::relu(tj::dense(x, hidden, "fc1"));
  h = tj::relu(tj::dense(h, hidden, "fc2"));
  return tj::dense(h, 10, "logits");
}

// A batch of inputs and labels drawn from Philox, so the demo needs no dataset.
ref::Feeds synthetic_batch(int64_t batch, int64_t features) {
  ref::Array x(tj::Shape{batch, features}), y(tj::Shape{batch}, tj::DType::i32);
  for (int64_t i = 0; i < x.size(); ++i) x[i] = tj::philox_uniform(7, 0, i);
  for (int64_t i = 0; i < batch; ++i) y[i] = static_cast<int>(tj::philox_uniform(7, 1, i) * 10);
  return {{"image", x}, {"label", y}};
}

tj::HostTensor to_host(const ref::Array& a) {
  tj::HostTensor t(a.shape, a.dtype);
  for (int64_t i = 0; i < a.size(); ++i) {
    if (a.dtype == tj::DType::f32) t.f32[i] = static_cast<float>(a[i]);
    else t.i32[i] = static_cast<int32_t>(a[i]);
  }
  return t;
}

double norm(const ref::Array& a) {
  double s = 0;
  for (double v : a.data) s += v * v;
  return std::sqrt(s);
}

}  // namespace

int main() {
  tj::Graph graph;
  tj::GraphScope use(graph);

  auto image = tj::input("image", {tj::kBatch, 64});
  auto label = tj::input("label", {tj::kBatch}, tj::DType::i32);
  auto logits = mlp(image, 32);
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, label)) +
              4e-5 * tj::l2_loss(tj::trainable_variables());
  auto variables = tj::trainable_variables();
  auto grads = tj::grad(loss, variables);

  std::printf("towerjit demo: a 64-32-32-10 MLP, its loss and gradients (reference interpreter)\n");
  std::printf("graph: %d nodes (forward and backward), %zu trainable variables\n\n", graph.size(),
              variables.size());

  auto values = ref::initialize_variables(graph, /*seed=*/1);
  const auto feeds = synthetic_batch(15, 64);
  std::vector<tj::Tensor> fetches = {loss};
  fetches.insert(fetches.end(), grads.begin(), grads.end());

  auto out = ref::run(graph, fetches, feeds, values);
  std::printf("initial loss %.6f (ln 10 = %.6f for a uniform guess)\n", out[0].item(), std::log(10.0));
  for (size_t i = 0; i < variables.size(); ++i)
    std::printf("  d loss / d %-14s %-10s |grad| = %.6f\n", variables[i].node().attrs.name.c_str(),
                variables[i].shape().str().c_str(), norm(out[i + 1]));

  // Plain SGD on the same batch: the loss must fall if the gradients are right.
  const double lr = 0.1;
  for (int step = 1; step <= 20; ++step) {
    for (size_t i = 0; i < variables.size(); ++i) {
      auto& v = values[variables[i].node().attrs.name];
      for (int64_t k = 0; k < v.size(); ++k) v[k] -= lr * out[i + 1][k];
    }
    out = ref::run(graph, fetches, feeds, values);
    if (step % 5 == 0) std::printf("step %2d  loss %.6f\n", step, out[0].item());
  }

  // The same step compiled for the CPU: one program for any batch size.
  tj::CpuProgram program(graph, fetches);
  tj::HostFeeds host_feeds;
  for (const auto& [name, a] : feeds) host_feeds[name] = to_host(a);
  tj::HostVariables host_values;
  for (const auto& [name, a] : values) host_values[name] = to_host(a);
  const auto jit = program.run(host_feeds, host_values);
  double worst = 0;
  for (size_t i = 0; i < jit.size(); ++i)
    for (int64_t k = 0; k < jit[i].size(); ++k)
      worst = std::max(worst, std::abs(jit[i].f32[k] - out[i][k]) / std::max(1.0, std::abs(out[i][k])));
  std::printf("\nCPU JIT: %zu fused kernels and %zu library calls, compiled in %.0f ms%s\n",
              program.program().kernels.size(), program.program().calls.size(),
              program.compile_stats().compile_ms, program.compile_stats().cache_hit ? " (cache hit)" : "");
  std::printf("CPU JIT loss %.6f; largest relative difference from the interpreter %.1e\n",
              jit[0].f32[0], worst);
  return 0;
}
