// Optimisers in the graph: an MLP trained with momentum on a warmed-up, decaying learning
// rate, gradients clipped by global norm, and an EMA of the weights, all as update ops that
// the CPU JIT compiles into the step's kernels. Evaluates with the EMA weights at the end.
//
//   ./build/examples/optimizer_step
#include <cstdio>

#include "dsl/philox.h"
#include "jit/reference/interpreter.h"
#include "runtime/cpu/cpu_program.h"
#include "towerjit.h"

namespace tj = towerjit;

int main() {
  tj::Graph graph;
  tj::GraphScope use(graph);
  auto image = tj::input("image", {tj::kBatch, 64});
  auto label = tj::input("label", {tj::kBatch}, tj::DType::i32);
  auto h = tj::relu(tj::dense(image, 32, "fc1"));
  auto logits = tj::dense(h, 10, "logits");
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, label));

  // The optimiser is a value; apply() appends its update ops (and the global step's).
  auto lr = tj::linear_warmup(tj::exponential_decay(0.2, 10, 0.9, /*staircase=*/true), 5);
  auto opt = tj::momentum(lr, 0.9, {.nesterov = true}).with_clip_by_global_norm(5.0);
  auto vars = tj::trainable_variables();
  opt.apply(tj::grad(loss, vars), vars);
  tj::ExponentialMovingAverage{.decay = 0.99}.apply(vars);  // after the apply: reads new weights

  // One compiled program runs forward, backward, apply and EMA; the rate is fetched to print.
  auto rate = lr.at(tj::global_step());
  tj::CpuProgram train(graph, {loss, rate}, /*run_update_ops=*/true);
  tj::CpuProgram eval(graph, {loss});

  tj::HostFeeds feeds{{"image", tj::HostTensor({15, 64})},
                      {"label", tj::HostTensor({15}, tj::DType::i32)}};
  for (int i = 0; i < 15 * 64; ++i) feeds["image"].f32[i] = float(tj::philox_uniform(7, 0, i));
  for (int i = 0; i < 15; ++i) feeds["label"].i32[i] = int(tj::philox_uniform(7, 1, i) * 10);
  tj::HostVariables vals;
  for (auto& [name, a] : tj::reference::initialize_variables(graph, 1)) {
    vals[name] = tj::HostTensor(a.shape);
    for (int64_t i = 0; i < a.size(); ++i) vals[name].f32[i] = float(a[i]);
  }

  std::printf("%s\n", opt.str().c_str());
  for (int step = 0; step < 30; ++step) {
    auto out = train.run(feeds, vals, step);
    if (step % 5 == 0 || step == 29)
      std::printf("step %2d  lr %.5f  loss %.5f  global_step %.0f\n", step, out[1].f32[0],
                  out[0].f32[0], vals["global_step"].f32[0]);
  }
  auto averaged = tj::with_ema_weights(vals, graph);
  std::printf("loss with the trained weights %.5f, with the EMA weights %.5f\n",
              eval.run(feeds, vals)[0].f32[0], eval.run(feeds, averaged)[0].f32[0]);
}
