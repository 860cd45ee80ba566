// Writing your own layer and loss in the DSL: a layer normalisation with learned gain and bias,
// and a label-smoothed cross-entropy, both from plain ops. Autodiff derives their gradients,
// the JIT fuses them into the training step, and the towers train them like any built-in layer.
//
//   ./build/examples/custom_model --epochs 1
//
// Before training, the example checks the custom loss's gradient against central finite
// differences on the reference interpreter: what to do whenever you write a layer of your own.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <optional>

#include "jit/reference/interpreter.h"
#include "towerjit.h"

namespace tj = towerjit;

namespace {

// y = gain * (x - mean) / sqrt(var + eps) + bias over the last axis, with variables
// "<name>/gain" (ones) and "<name>/bias" (zeros) created in a scope of its own, so a second
// call with the same name under Reuse::reuse shares them. (towerjit has this layer built in,
// tj::layer_norm; it is written out here as the example of a layer of your own.)
tj::Tensor my_layer_norm(tj::Tensor x, const std::string& name, double eps = 1e-5) {
  tj::VariableScope scope(name);
  const int64_t features = x.shape()[x.rank() - 1];
  auto gain = tj::variable("gain", {features}, {.init = tj::init::constant(1)});
  auto bias = tj::variable("bias", {features}, {.init = tj::init::zeros()});
  auto centred = x - tj::mean(x, {-1}, /*keepdims=*/true);
  auto variance = tj::mean(centred * centred, {-1}, true);
  return gain * centred * tj::rsqrt(variance + eps) + bias;
}

// Cross-entropy against (1 - s) * one_hot(label) + s / classes: a softer target that keeps
// the logits from growing without bound. Mean over the batch.
tj::Tensor label_smoothing_cross_entropy(tj::Tensor logits, tj::Tensor labels, double smoothing) {
  const int64_t classes = logits.shape()[1];
  auto target = (1 - smoothing) * tj::one_hot(labels, classes) + smoothing / classes;
  return tj::mean(-tj::sum(target * tj::log_softmax(logits), {1}));
}

tj::Tensor model(tj::Tensor image) {
  auto h = tj::relu(my_layer_norm(tj::dense(image, 256, "fc1"), "norm1"));
  h = tj::relu(my_layer_norm(tj::dense(h, 128, "fc2"), "norm2"));
  return tj::dense(h, 10, "logits");
}

// The largest relative difference between autodiff's gradient of `loss` and central
// differences, over a few elements of every variable, in double precision.
double gradient_check(tj::Graph& graph, tj::Tensor loss, const tj::data::Dataset& data) {
  tj::GraphScope use(graph);
  const auto variables = tj::trainable_variables();
  const auto grads = tj::grad(loss, variables);
  tj::reference::Feeds feeds;
  std::vector<int64_t> rows = {0, 1, 2, 3};
  tj::HostTensor images, labels;
  tj::data::gather_batch(data, rows, images, labels);
  feeds["image"] = tj::reference::Array(images.shape, tj::DType::f32);
  feeds["label"] = tj::reference::Array(labels.shape, tj::DType::i32);
  for (int64_t k = 0; k < images.size(); ++k) feeds["image"][k] = images.f32[k];
  for (int64_t k = 0; k < labels.size(); ++k) feeds["label"][k] = labels.i32[k];
  auto values = tj::reference::initialize_variables(graph, 7);
  std::vector<tj::Tensor> fetches = {loss};
  fetches.insert(fetches.end(), grads.begin(), grads.end());
  const auto exact = tj::reference::run(graph, fetches, feeds, values);
  double worst = 0;
  for (size_t v = 0; v < variables.size(); ++v) {
    auto& value = values.at(variables[v].node().attrs.name);
    for (int64_t k = 0; k < value.size(); k += std::max<int64_t>(1, value.size() / 5)) {
      const double h = 1e-4, saved = value[k];
      value[k] = saved + h;
      const double up = tj::reference::run(graph, {loss}, feeds, values)[0][0];
      value[k] = saved - h;
      const double down = tj::reference::run(graph, {loss}, feeds, values)[0][0];
      value[k] = saved;
      const double numeric = (up - down) / (2 * h), analytic = exact[v + 1][k];
      worst = std::max(worst, std::abs(numeric - analytic) / std::max(1e-3, std::abs(numeric)));
    }
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t epochs = 1, steps = 0;
  std::string towers_flag = "cpu:0,cpu:1", data_dir = tj::data::kFashionMnistDir, dump_dir,
              tensorboard_dir;
  CLI::App app{"A custom layer (layer norm) and loss (label smoothing) written in the DSL, trained on Fashion-MNIST"};
  app.add_option("--epochs", epochs, "passes over the training set");
  app.add_option("--steps", steps, "stop after this many steps (alone: as many epochs as they take)");
  app.add_option("--towers", towers_flag, "devices, e.g. cpu:0,cpu:1");
  app.add_option("--data", data_dir, "a directory in MNIST's layout");
  app.add_option("--dump", dump_dir, "write the CUDA C and PTX of every program the trainer compiled here");
  app.add_option("--tensorboard", tensorboard_dir, "write TensorBoard event files of the loss and evaluations to DIR");
  CLI11_PARSE(app, argc, argv);
  // --steps alone trains that many steps; with --epochs too, the epochs must hold them.
  const std::optional<int64_t> fit_epochs =
      steps > 0 && app.count("--epochs") == 0 ? std::nullopt : std::optional<int64_t>(epochs);
  try {
    const auto train_set = tj::data::load_mnist_format("train", data_dir);
    const auto test_set = tj::data::load_mnist_format("test", data_dir);
    tj::Graph graph;
    tj::GraphScope use(graph);
    auto image = tj::input("image", {tj::kBatch, 784});
    auto label = tj::input("label", {tj::kBatch}, tj::DType::i32);
    auto logits = model(image);
    auto loss = label_smoothing_cross_entropy(logits, label, 0.1);
    std::printf("gradient check (central differences, 4 examples): largest relative error %.2e\n",
                gradient_check(graph, loss, train_set));

    tj::TowerTrainer trainer(graph, loss, tj::Towers(tj::parse_devices(towers_flag)), tj::adam(1e-3),
                             {.logits = logits});
    if (!dump_dir.empty())
      for (const std::string& path : tj::dump_cuda(trainer, dump_dir)) std::printf("wrote %s\n", path.c_str());
    tj::data::BatchPipeline pipeline(train_set, {.batch = 128, .min_batch = trainer.towers().size()});
    tj::report::Progress progress(steps > 0 ? steps : epochs * pipeline.batches_per_epoch());
    std::optional<tj::report::TensorBoardWriter> tensorboard;
    if (!tensorboard_dir.empty()) tensorboard.emplace(tensorboard_dir, tj::Loc::current());
    tj::LogHook log(progress, tensorboard ? &*tensorboard : nullptr);
    tj::EvalHook eval(test_set, progress, tensorboard ? &*tensorboard : nullptr);
    tj::fit(trainer, pipeline, {.epochs = fit_epochs, .max_steps = steps, .hooks = {&log, &eval}});
    progress.finish();
    std::printf("test accuracy %.4f\n", eval.last().accuracy);
  } catch (const tj::Interrupted& stop) {  // Ctrl-C or SIGTERM: fit finished the step
    std::fprintf(stderr, "%s\n", stop.what());
    return stop.exit_code();
  } catch (const tj::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
