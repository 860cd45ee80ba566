// Trains the same model from the same initial weights on the same batches twice over the same
// towers: once with synchronous gradient averaging, once with asynchronous apply (each tower
// applies its own gradient, scaled by 1/N, with no barrier between the towers), and plots both
// runs, each in its own colour: <out>/sync_and_async-loss.svg (train loss smoothed over the raw
// curve, test loss) and <out>/sync_and_async-accuracy.svg (test accuracy every --eval-every steps).
//
//   ./build/examples/async_vs_sync --towers cpu:0,cpu:1 --steps 300 --out runs/async_vs_sync
//
// Sync takes one optimiser step per batch with the full batch's gradient; async takes N steps
// per batch, each from a slice's gradient computed on weights another tower may already have
// moved (the staleness the seeds accept for throughput).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "examples/models.h"
#include "towerjit.h"

namespace tj = towerjit;

namespace {

struct Flags {
  std::string towers = "cpu:0,cpu:1";
  std::string model = "mlp";
  std::string out = "async_vs_sync";
  std::string data = tj::data::kFashionMnistDir;
  std::string dump;  // the CUDA of each run's programs, under <dump>/<run>
  std::string tensorboard;  // each run's event files, under <tensorboard>/<run> (TensorBoard's runs)
  int64_t steps = 300;
  int64_t batch = 128;
  int64_t eval_every = 100;  // and after the last step
  double lr = 0.05;
  uint64_t seed = 1;
};

// Keeps each step's loss, and the test set's accuracy and loss every `every` steps, as the
// metrics a MetricsWriter would get, for the plots.
struct Curves : tj::Hook {
  Curves(const tj::data::Dataset& test, int64_t every) : test(test), every(every) {}
  const tj::data::Dataset& test;
  int64_t every;
  tj::report::MetricsLog log;
  tj::report::MetricsSink* sink = nullptr;  // also sent there (--tensorboard)
  void after_step(tj::TowerTrainer& trainer, const tj::StepEvent& e) override {
    log.steps.push_back({e.step, e.epoch + 1, e.loss, e.learning_rate, e.samples_per_s});
    if (sink) sink->log_step(log.steps.back());
    if (every > 0 && e.step % every == 0) evaluate(trainer, e);
  }
  void end(tj::TowerTrainer& trainer, const tj::StepEvent& last) override {
    if (log.evals.empty() || log.evals.back().step != last.step) evaluate(trainer, last);
  }
  bool uses_trainer_at(const tj::StepEvent& e) const override { return every > 0 && e.step % every == 0; }
  void evaluate(tj::TowerTrainer& trainer, const tj::StepEvent& e) {
    const auto r = trainer.evaluate({{"image", test.images}}, test.labels);
    log.evals.push_back({e.step, e.epoch + 1, r.accuracy, r.loss});
    if (sink) sink->log_eval(log.evals.back());
  }
};

struct Outcome {
  tj::report::Run run;
  double seconds = 0, accuracy = 0, loss = 0;
  int64_t applies = 0;
};

Outcome train(const Flags& f, const tj::Towers& towers, const std::string& name, const std::string& run,
              const tj::data::Dataset& train_set, const tj::data::Dataset& test_set) {
  tj::Graph graph;
  tj::GraphScope use(graph);
  auto image = tj::input("image", {tj::kBatch, 784});
  auto label = tj::input("label", {tj::kBatch}, tj::DType::i32);
  auto logits = f.model == "cnn" ? examples::cnn(image) : examples::mlp(image);
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, label));
  tj::TowerTrainer trainer(graph, loss, towers, tj::momentum(f.lr, 0.9), {.seed = f.seed, .logits = logits});
  if (!f.dump.empty()) tj::dump_cuda(trainer, f.dump + "/" + run);
  tj::data::BatchPipeline pipeline(train_set, {.batch = f.batch, .seed = f.seed, .min_batch = towers.size()});
  Curves curves(test_set, f.eval_every);
  std::optional<tj::report::TensorBoardWriter> tensorboard;
  if (!f.tensorboard.empty()) tensorboard.emplace(f.tensorboard + "/" + run, tj::Loc::current());
  curves.sink = tensorboard ? &*tensorboard : nullptr;
  const auto start = std::chrono::steady_clock::now();
  tj::fit(trainer, pipeline, {.epochs = 1 + f.steps / pipeline.batches_per_epoch(), .max_steps = f.steps,
                              .hooks = {&curves}});
  Outcome o;
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  o.run = {name, std::move(curves.log)};
  o.accuracy = o.run.log.evals.back().test_accuracy, o.loss = o.run.log.evals.back().test_loss;
  o.applies = trainer.applies();
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Train the same model with sync and async towers and plot both loss curves"};
  app.add_option("--towers", f.towers, "devices, e.g. cpu:0,cpu:1,cpu:2");
  app.add_option("--model", f.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--steps", f.steps, "batches each run trains on");
  app.add_option("--batch", f.batch, "examples per batch, split over the towers");
  app.add_option("--lr", f.lr, "momentum SGD's learning rate");
  app.add_option("--seed", f.seed, "initial weights and the shuffle");
  app.add_option("--data", f.data, "a directory in MNIST's layout");
  app.add_option("--eval-every", f.eval_every, "evaluate on the test set every N steps (0: only at the end)");
  app.add_option("--out", f.out, "directory for the plots");
  app.add_option("--tensorboard", f.tensorboard, "write each run's TensorBoard event files to DIR/sync and DIR/async");
  app.add_option("--dump", f.dump, "write the CUDA C and PTX of each run's programs to DIR/sync and DIR/async");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto train_set = tj::data::load_mnist_format("train", f.data);
    const auto test_set = tj::data::load_mnist_format("test", f.data);
    const auto towers = tj::Towers(tj::parse_devices(f.towers));
    const Outcome sync = train(f, towers, "sync average", "sync", train_set, test_set);
    const Outcome async = train(f, towers.reduce(tj::AsyncApply{}), "async apply (1/N)", "async", train_set, test_set);
    for (const auto* o : {&sync, &async})
      std::printf("%-18s %5lld applies in %5.1f s: final train loss %.4f, test accuracy %.4f, test loss %.4f\n",
                  o->run.name.c_str(), static_cast<long long>(o->applies), o->seconds,
                  o->run.log.steps.empty() ? 0.0 : o->run.log.steps.back().loss, o->accuracy, o->loss);
    std::error_code ignored;  // write_svg_plot names the path if it is still not writable
    std::filesystem::create_directories(f.out, ignored);
    for (const auto& plot :
         tj::report::write_runs_plots({sync.run, async.run}, f.out + "/sync_and_async", "sync and async on " + f.towers))
      std::printf("plot: %s\n", plot.c_str());
  } catch (const tj::Interrupted& stop) {  // Ctrl-C or SIGTERM: fit finished the step
    std::fprintf(stderr, "%s\n", stop.what());
    return stop.exit_code();
  } catch (const tj::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
