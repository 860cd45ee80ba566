// Trains an MLP on Fashion-MNIST over CPU towers and reports the test accuracy.
//
//   ./build/examples/fashion_mnist --towers cpu:0,cpu:1 --strategy sync --epochs 3
//
// The model is written in the DSL; the towers split every batch, run the same compiled step on
// their slices, and combine their gradients (sync) or apply them one by one (async).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>

#include "runtime/data/fashion_mnist.h"
#include "runtime/towers/tower_trainer.h"
#include "towerjit.h"

namespace tj = towerjit;

namespace {

struct Flags {
  std::string towers = "cpu:0,cpu:1";
  std::string strategy = "sync";
  std::string optimizer = "adam";
  std::string data = tj::data::kFashionMnistDir;
  int epochs = 3;
  int64_t batch = 128;
  int64_t hidden = 256;
  int64_t steps = 0;  // stop early after this many steps (0: whole epochs)
  double lr = 0.001;
  uint64_t seed = 1;
};

// Test accuracy and mean loss, evaluated in chunks by one compiled program (any chunk size).
std::pair<double, double> evaluate(tj::CpuProgram& eval, const tj::data::Dataset& test,
                                   tj::HostVariables& variables) {
  double correct = 0, loss = 0;
  for (int64_t start = 0; start < test.size(); start += 1000) {
    std::vector<int64_t> rows(std::min<int64_t>(1000, test.size() - start));
    std::iota(rows.begin(), rows.end(), start);
    tj::HostFeeds feeds{{"image", {}}, {"label", {}}};
    tj::data::gather_batch(test, rows, feeds["image"], feeds["label"]);
    const auto out = eval.run(feeds, variables);
    correct += out[0].f32[0];
    loss += out[1].f32[0];
  }
  return {correct / test.size(), loss / test.size()};
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Train an MLP on Fashion-MNIST over CPU towers"};
  app.add_option("--towers", f.towers, "devices, e.g. cpu:0,cpu:1 (GPU towers are not built yet)");
  app.add_option("--strategy", f.strategy, "sync (weighted average) or async")
      ->check(CLI::IsMember({"sync", "async"}));
  app.add_option("--data", f.data, "a directory in MNIST's layout");
  app.add_option("--epochs", f.epochs, "passes over the training set");
  app.add_option("--batch", f.batch, "examples per step, split over the towers");
  app.add_option("--hidden", f.hidden, "units in each of the two hidden layers");
  app.add_option("--steps", f.steps, "stop after this many steps");
  app.add_option("--optimizer", f.optimizer, "adam, momentum (0.9) or sgd")
      ->check(CLI::IsMember({"momentum", "sgd", "adam"}));
  app.add_option("--lr", f.lr, "learning rate");
  app.add_option("--seed", f.seed, "initial weights and the shuffle");
  CLI11_PARSE(app, argc, argv);

  try {
    const auto train = tj::data::load_mnist_format("train", f.data);
    const auto test = tj::data::load_mnist_format("test", f.data);

    tj::Graph graph;
    tj::GraphScope use(graph);
    auto image = tj::input("image", {tj::kBatch, 784});
    auto label = tj::input("label", {tj::kBatch}, tj::DType::i32);
    auto h = tj::relu(tj::dense(image, f.hidden, "fc1"));
    h = tj::relu(tj::dense(h, f.hidden, "fc2"));
    auto logits = tj::dense(h, 10, "logits");
    auto losses = tj::softmax_cross_entropy(logits, label);
    auto loss = tj::mean(losses);
    auto correct = tj::sum(tj::cast(tj::equal(tj::argmax(logits, 1), label), tj::DType::f32));
    tj::CpuProgram eval(graph, {correct, tj::sum(losses)});

    auto towers = tj::Towers(tj::parse_devices(f.towers));
    if (f.strategy == "async") towers = towers.reduce(tj::AsyncApply{});
    const tj::Optimizer optimizer = f.optimizer == "adam" ? tj::adam(f.lr)
                                    : f.optimizer == "sgd" ? tj::sgd(f.lr)
                                                           : tj::momentum(f.lr, 0.9);
    tj::TowerTrainer trainer(graph, loss, towers, optimizer, {.seed = f.seed});
    std::printf("towerjit: 784-%lld-%lld-10 MLP on %s, %s, %s lr %g, batch %lld, %d epoch(s)\n",
                static_cast<long long>(f.hidden), static_cast<long long>(f.hidden),
                towers.str().c_str(), f.strategy.c_str(), f.optimizer.c_str(), f.lr,
                static_cast<long long>(f.batch), f.epochs);

    std::vector<int64_t> order(train.size());
    std::iota(order.begin(), order.end(), 0);
    int64_t step = 0;
    for (int epoch = 1; epoch <= f.epochs && (f.steps == 0 || step < f.steps); ++epoch) {
      std::shuffle(order.begin(), order.end(), std::mt19937_64(f.seed * 1000 + epoch));
      const auto start = std::chrono::steady_clock::now();
      double loss_sum = 0;
      int64_t seen = 0, epoch_steps = 0;
      for (int64_t b = 0; b < train.size() && (f.steps == 0 || step < f.steps); b += f.batch) {
        const std::vector<int64_t> rows(order.begin() + b, order.begin() + std::min(b + f.batch, train.size()));
        if (static_cast<int>(rows.size()) < towers.size()) break;  // too few to split
        tj::HostFeeds feeds{{"image", {}}, {"label", {}}};
        tj::data::gather_batch(train, rows, feeds["image"], feeds["label"]);
        loss_sum += trainer.step(feeds).loss * rows.size();
        seen += rows.size(), ++epoch_steps, ++step;
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const auto [accuracy, test_loss] = evaluate(eval, test, trainer.variables());
      std::printf("epoch %d: %lld steps, train loss %.4f, %.0f samples/s; test accuracy %.4f, test loss %.4f\n",
                  epoch, static_cast<long long>(epoch_steps), loss_sum / seen, seen / seconds, accuracy, test_loss);
    }
  } catch (const tj::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
