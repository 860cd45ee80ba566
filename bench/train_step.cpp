#include "bench/train_step.h"

#include <random>

#include "dsl/autodiff.h"
#include "examples/gpt.h"
#include "examples/models.h"
#include "dsl/error.h"
#include "dsl/layers.h"
#include "dsl/ops.h"
#include "dsl/variables.h"
#include "jit/reference/interpreter.h"

namespace towerjit::bench {
namespace {

constexpr int64_t kClasses = 10;

Tensor mlp(Tensor x, int64_t hidden) {
  Tensor h = relu(dense(x, hidden, "fc1"));
  h = relu(dense(h, hidden, "fc2"));
  return dense(h, kClasses, "logits");
}

Tensor cnn(Tensor x) {
  Conv2DLayerOptions same;  // 3x3, stride 1, pad 1: the spatial size stays
  same.pad = 1;
  Tensor h = relu(conv2d(x, 16, 3, "conv1", same));
  h = max_pool2d(h, {.kernel = 2});
  h = relu(conv2d(h, 32, 3, "conv2", same));
  h = max_pool2d(h, {.kernel = 2});
  return dense(reshape(h, {kBatch, 32 * 7 * 7}), kClasses, "logits");
}

// m' = 0.9 m + g; w' = w - 0.05 m' (torch.optim.SGD, momentum 0.9, dampening 0).
void sgd_momentum(const std::vector<Tensor>& weights, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < weights.size(); ++i) {
    const Tensor& w = weights[i];
    Tensor m = variable(w.node().attrs.name + "/momentum", w.shape(),
                        {.init = init::zeros(), .trainable = false});
    Tensor next_m = add(mul(m, kMomentum), grads[i]);
    Tensor next_w = sub(w, mul(next_m, kLearningRate));
    assign(m, next_m);
    assign(w, next_w);
  }
}

}  // namespace

std::vector<std::string> workload_names() { return {"mlp-large", "mlp-small", "cnn", "resnet-bn", "gpt-small"}; }

TrainStep build_train_step(const std::string& workload) {
  TrainStep s;
  s.workload = workload;
  s.graph = std::make_unique<Graph>();
  GraphScope use(*s.graph);
  Tensor logits;
  if (workload == "mlp-large" || workload == "mlp-small") {
    const bool large = workload == "mlp-large";
    s.batch = large ? 256 : 64;
    s.image = Shape{s.batch, 784};
    logits = mlp(input("image", {kBatch, 784}), large ? 512 : 64);
  } else if (workload == "cnn") {
    s.batch = 128;
    s.image = Shape{s.batch, 1, 28, 28};
    logits = cnn(input("image", {kBatch, 1, 28, 28}));
  } else if (workload == "resnet-bn") {
    // The example's ResNet: 8 convolutions, batch norm after each, dropout; some 70 kernels.
    s.batch = 128;
    s.image = Shape{s.batch, 784};
    logits = examples::resnet(input("image", {kBatch, 784}));
  } else if (workload == "gpt-small") {
    const examples::GptConfig c{.vocab = 86, .context = 64, .dim = 64, .heads = 4, .layers = 2};
    s.batch = 32;
    s.context = c.context;
    s.vocab = c.vocab;
    logits = examples::gpt(input("tokens", {kBatch, c.context}, DType::i32), c);
    s.loss = mean(softmax_cross_entropy(logits, input("targets", {kBatch, c.context}, DType::i32)));
  } else {
    throw Error("towerjit_bench: unknown workload \"" + workload +
                "\"; choose one of mlp-large, mlp-small, cnn, resnet-bn, gpt-small");
  }
  if (s.vocab == 0) s.loss = mean(softmax_cross_entropy(logits, input("label", {kBatch}, DType::i32)));
  s.trainable = trainable_variables();
  sgd_momentum(s.trainable, grad(s.loss, s.trainable));
  return s;
}

HostFeeds random_feeds(const TrainStep& step, uint32_t seed) {
  std::mt19937 rng(seed);
  if (step.vocab > 0) {
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(step.vocab) - 1);
    HostTensor tokens(Shape{step.batch, step.context}, DType::i32), targets(Shape{step.batch, step.context}, DType::i32);
    for (int32_t& v : tokens.i32) v = token(rng);
    for (int32_t& v : targets.i32) v = token(rng);
    return {{"tokens", std::move(tokens)}, {"targets", std::move(targets)}};
  }
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> klass(0, kClasses - 1);
  HostTensor image(step.image), label(Shape{step.batch}, DType::i32);
  for (float& v : image.f32) v = pixel(rng);
  for (int32_t& v : label.i32) v = klass(rng);
  return {{"image", std::move(image)}, {"label", std::move(label)}};
}

HostVariables initial_variables(const TrainStep& step, uint64_t seed) {
  HostVariables out;
  for (const auto& [name, a] : reference::initialize_variables(*step.graph, seed)) {
    HostTensor t(a.shape, a.dtype);
    for (int64_t i = 0; i < a.size(); ++i) {
      if (a.dtype == DType::f32) t.f32[i] = static_cast<float>(a[i]);
      else t.i32[i] = static_cast<int32_t>(a[i]);
    }
    out[name] = std::move(t);
  }
  return out;
}

}  // namespace towerjit::bench
