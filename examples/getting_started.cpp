// The model of docs/getting-started.md, section 2: kept here so the build proves it compiles.
//
//   ./build/examples/getting_started
#include <cstdio>

#include "towerjit.h"
namespace tj = towerjit;

int main() {
  const auto train = tj::data::load_mnist_format("train");
  const auto test = tj::data::load_mnist_format("test");
  tj::Graph graph;
  tj::GraphScope use(graph);
  auto image = tj::input("image", {tj::kBatch, 784});
  auto label = tj::input("label", {tj::kBatch}, tj::DType::i32);
  auto h = tj::gelu(tj::dense(image, 128, "fc1"));
  auto logits = tj::dense(h, 10, "logits");
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, label))
            + 1e-4 * tj::l2_loss(tj::trainable_variables());

  tj::TowerTrainer trainer(graph, loss, tj::Towers{tj::cpu(0), tj::cpu(1)}, tj::adam(1e-3),
                           {.ema = tj::ExponentialMovingAverage{.decay = 0.999}, .logits = logits});
  tj::data::BatchPipeline batches(train, {.batch = 100, .seed = 1});
  tj::report::Progress progress(batches.batches_per_epoch());
  tj::LogHook log(progress, /*metrics=*/nullptr);
  tj::fit(trainer, batches, {.epochs = 1, .hooks = {&log}});
  progress.finish();

  auto result = trainer.evaluate({{"image", test.images}}, test.labels, /*ema_weights=*/true);
  std::printf("test accuracy %.4f\n", result.accuracy);
}
