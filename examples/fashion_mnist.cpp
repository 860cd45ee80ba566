// Trains a model on Fashion-MNIST over towers and reports the test accuracy.
//
//   ./build/examples/fashion_mnist --model mlp --towers cpu:0,cpu:1 --strategy sync --epochs 3
//   ./build/examples/fashion_mnist --model cnn --epochs 5 --metrics runs/cnn.jsonl --checkpoint runs/cnn
//   ./build/examples/fashion_mnist --model cnn --epochs 5 --checkpoint runs/cnn --resume
//   ./build/examples/fashion_mnist --data-npz fashion_mnist.npz --export-safetensors mlp.safetensors
//
// Ctrl-C (SIGINT) or SIGTERM stops after the current step, writes a final checkpoint (with
// --checkpoint), prints the command that resumes the run and exits 130 or 143; a second
// Ctrl-C stops at once.
//
// The model is written in the DSL (examples/models.h); the towers split every batch, run the
// same compiled step on their slices, and combine their gradients (sync) or apply them one by
// one (async). fit() drives the loop; hooks log, evaluate and checkpoint.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>

#include "examples/models.h"
#include "runtime/cuda/driver_api.h"
#include "runtime/dist/world.h"
#include "runtime/report/trace.h"
#include "jit/passes/half_matmuls.h"
#include "towerjit.h"

namespace tj = towerjit;

namespace {

// A whole number of at least `least`, refused with what the flag's values mean. CLI11's
// NonNegativeNumber / PositiveNumber name their range as doubles up to 1.8e308, 300 digits long.
CLI::Validator at_least(long long least, const std::string& meaning) {
  return CLI::Validator(
      [least, meaning](std::string& v) {
        char* end = nullptr;
        errno = 0;
        const long long n = std::strtoll(v.c_str(), &end, 10);
        if (end != v.c_str() && *end == '\0' && errno == 0 && n >= least) return std::string();
        return "must be a whole number >= " + std::to_string(least) + " (" + meaning + "), not " + v;
      },
      "N >= " + std::to_string(least));
}

struct Flags {
  std::string model = "mlp";
  std::string towers;  // empty: every GPU present, else two CPU towers
  std::string strategy = "sync";
  std::string optimizer = "adam";
  std::string data = tj::data::kFashionMnistDir;
  std::string data_npz;            // --data-npz FILE: x_train, y_train, x_test, y_test in place of --data
  std::string export_safetensors;  // --export-safetensors FILE: the trained weights, PyTorch's names
  std::string dump, checkpoint, metrics, trace;
  std::string tensorboard;  // --tensorboard DIR: event files of the metrics
  int64_t histogram_every = 0;  // --histogram-every N: the weights' histograms there too
  std::string keep_best;  // "accuracy" or "loss": also keep best.tjck by that test metric
  int64_t epochs = 3;
  int64_t batch = 128;
  int64_t hidden = 256;
  int64_t max_staleness = -1;  // --strategy async: a tower at most this many applies ahead (-1: no bound)
  int64_t steps = 0;  // stop after this many steps (0: whole epochs)
  bool epochs_given = false;  // --epochs on the command line
  int64_t log_every = 10;
  int64_t checkpoint_every = 0;
  int64_t eval_every = 0;  // 0: after each epoch only
  int64_t eval_examples = 0;  // --eval-examples N: the test set's first N only (0: all of it)
  double lr = 0.001;
  double ema = 0;     // 0: no moving averages
  uint64_t seed = 1;
  bool resume = false;
  bool drop_last = false;
  bool check_numerics = false;
  std::string precision = "f32";  // "bf16" / "f16": every matmul takes such operands (f32 masters)
  std::string gradient_compression = "off";  // "bf16" / "f16": gradients cross processes in 16 bits
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  int64_t decay_steps = 0;  // 0: the whole run (set by train() from the data once loaded)
  int accumulate = 1;       // micro-batches of --batch per apply
  int64_t step_batch() const { return batch * accumulate; }
  // --steps alone trains that many steps; with --epochs too, the epochs must hold them (fit
  // says so when they do not).
  std::optional<int64_t> fit_epochs() const {
    return steps > 0 && !epochs_given ? std::nullopt : std::optional<int64_t>(epochs);
  }
  int64_t total_steps(int64_t per_epoch) const {
    return steps > 0 ? (fit_epochs() ? std::min(steps, epochs * per_epoch) : steps) : epochs * per_epoch;
  }
  bool augment = false;  // random crop (pad 2) and horizontal flip of the training images
  std::string export_onnx;  // --export-onnx FILE: the inference program as ONNX, after training
};

// --lr under --lr-schedule, over f.decay_steps (counted in the optimiser's applies, as the
// global step is), after --warmup-steps of linear warm-up.
tj::Schedule make_schedule(const Flags& f) {
  const double steps = static_cast<double>(std::max<int64_t>(f.decay_steps, 1));
  tj::Schedule s = f.lr;
  if (f.lr_schedule == "cosine") s = tj::cosine_decay(f.lr, steps);
  if (f.lr_schedule == "exponential") s = tj::exponential_decay(f.lr, steps, 0.01);  // to 1% at the end
  if (f.lr_schedule == "piecewise")  // a tenth at half the run, a hundredth at three quarters
    s = tj::piecewise_constant({std::floor(steps / 2), std::floor(steps * 3 / 4)}, {f.lr, f.lr / 10, f.lr / 100});
  return f.warmup_steps > 0 ? tj::linear_warmup(s, static_cast<double>(f.warmup_steps)) : s;
}

tj::Optimizer make_optimizer(const Flags& f) {
  tj::Optimizer o = f.optimizer == "sgd"        ? tj::sgd(make_schedule(f))
                    : f.optimizer == "momentum" ? tj::momentum(make_schedule(f), 0.9)
                                                : tj::adam(make_schedule(f));
  // f16 products need the loss scaled, or small gradients round to zero (dsl/loss_scale.h).
  return f.precision == "f16" ? o.with_loss_scale() : o;
}

// Without --towers: a tower on every GPU the machine has, else two CPU towers. Under mpirun:
// one tower per process, on the GPU of its local rank (as Horovod), else on the CPU. Under
// srun, Open MPI sets no OMPI_COMM_WORLD_LOCAL_RANK (not even after MPI_Init): Slurm's
// SLURM_LOCALID is the same number.
std::string default_towers() {
  const int gpus = tj::cuda::cuda_device_count();
  if (tj::dist::world().size() > 1) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!local) local = std::getenv("SLURM_LOCALID");
    return gpus == 0 ? "cpu:0" : "gpu:" + std::to_string((local ? std::atoi(local) : 0) % gpus);
  }
  if (gpus == 0) return "cpu:0,cpu:1";
  std::string spec;
  for (int i = 0; i < gpus; ++i) spec += (i ? ",gpu:" : "gpu:") + std::to_string(i);
  return spec;
}

tj::Towers make_towers(const Flags& f) {
  auto towers = tj::Towers(tj::parse_devices(f.towers.empty() ? default_towers() : f.towers));
  // The trainer's own precision policy (its programs only; the process's stays f32).
  if (f.precision != "f32")
    towers = towers.precision({.matmul_operands = *tj::dtype_from_name(f.precision)});  // checked by the flag
  if (f.strategy == "async")
    return towers.reduce(tj::AsyncApply{
        .max_staleness = f.max_staleness >= 0 ? std::optional<int64_t>(f.max_staleness) : std::nullopt});
  if (f.strategy == "sync-ps") return towers.variant(tj::SyncVariant::parameter_server);
  return towers;
}

// Where checkpoints go: --checkpoint's directory, or the directory of the checkpoint file it
// names (resumed from, and saved beside).
std::string checkpoint_dir(const Flags& f) {
  if (!std::filesystem::is_regular_file(f.checkpoint)) return f.checkpoint;
  const std::filesystem::path parent = std::filesystem::path(f.checkpoint).parent_path();
  return parent.empty() ? "." : parent.string();
}

// What must agree between a checkpoint and the run resuming it.
std::map<std::string, std::string> run_metadata(const Flags& f, const tj::Towers& towers) {
  const std::string hidden = std::to_string(f.hidden);
  const std::string model = f.model == "mlp" ? "MLP 784-" + hidden + "-" + hidden + "-10"
                            : f.model == "cnn" ? "CNN conv16-pool-conv32-pool-dense128-dense10"
                                               : "ResNet conv16-block16-pool-conv32-block32-pool-dropout-dense10 (BN)";
  return {{"model", model},
          {"towers", towers.str()}, {"optimizer", make_optimizer(f).str()},
          {"batch", std::to_string(f.batch) + (f.accumulate > 1 ? " x " + std::to_string(f.accumulate) + " accumulated" : "")},
          {"seed", std::to_string(f.seed)},
          {"drop_last", f.drop_last ? "true" : "false"},
          {"augment", f.augment ? "crop pad 2, flip" : "off"},
          {"ema", f.ema > 0 ? [&] { std::ostringstream o; o << "--ema " << f.ema; return o.str(); }() : "off (no --ema)"}};
}

// What every rank of an mpirun must agree on: the run's metadata but this rank's own towers,
// and the flags that decide how long it trains.
std::map<std::string, std::string> shared_flags(const Flags& f, std::map<std::string, std::string> metadata) {
  metadata.erase("towers");
  metadata["strategy"] = f.strategy;
  metadata["epochs"] = std::to_string(f.epochs);
  metadata["steps"] = std::to_string(f.steps);
  metadata["data"] = f.data_npz.empty() ? f.data : "npz " + f.data_npz;
  metadata["checkpoint"] = f.checkpoint + (f.resume ? " (resume)" : "");
  metadata["gradient_compression"] = f.gradient_compression;
  return metadata;
}

// --data-npz: one split of an archive laid out as Keras' fashion_mnist.npz (x_train, y_train,
// x_test, y_test; images [N, 28, 28] or [N, 784], uint8 pixels or floats in [0, 1]).
tj::data::Dataset npz_split(const std::string& path, const std::string& split) {
  const auto data = tj::data::TensorDataset::from_npz(
      path, {.features = "x_" + split, .labels = "y_" + split, .flatten = true}, tj::Loc::current());
  const tj::HostTensor& images = data.array("image");
  if (images.shape[1] != 784)
    throw tj::Error("towerjit: array \"x_" + split + "\" of \"" + path + "\" has " + std::to_string(images.shape[1]) +
                    " values an image; the models take 28 x 28 images (784 values): save them as [N, 28, 28] or "
                    "[N, 784]");
  return {images, data.labels()};
}

tj::data::Dataset load_split(const Flags& f, const std::string& split) {
  return f.data_npz.empty() ? tj::data::load_mnist_format(split, f.data) : npz_split(f.data_npz, split);
}

// --eval-examples N: the first N examples of the test set (Keras' validation_steps, Lightning's
// limit_val_batches), for quick runs; more than it has is an error naming its size.
tj::data::Dataset first_examples(tj::data::Dataset data, int64_t n) {
  if (n == 0 || n == data.size()) return data;
  if (n > data.size())
    throw tj::Error("towerjit: --eval-examples " + std::to_string(n) + " is more than the test set's " +
                    std::to_string(data.size()) + " examples; give at most " + std::to_string(data.size()) +
                    ", or leave the flag out to evaluate on all of them");
  tj::HostTensor images(tj::Shape{n, data.images.shape[1]}, tj::DType::f32), labels(tj::Shape{n}, tj::DType::i32);
  std::copy_n(data.images.f32.begin(), images.f32.size(), images.f32.begin());
  std::copy_n(data.labels.i32.begin(), n, labels.i32.begin());
  return {std::move(images), std::move(labels)};
}

int train(Flags f, const std::string& resume_command) {
  // Under mpirun every rank trains its towers; rank 0 alone prints, evaluates, logs metrics,
  // dumps and writes checkpoints.
  tj::dist::Transport& world = tj::dist::world();
  const bool lead = world.rank() == 0;
  // Every program compiled below (TOWERJIT_DUMP and TOWERJIT_CHECK_NUMERICS still override).
  tj::set_compile_options({.dump_dir = lead ? f.dump : "", .check_numerics = f.check_numerics});
  const auto train_set = load_split(f, "train");
  const auto test_set = first_examples(load_split(f, "test"), f.eval_examples);
  // Every rank's towers (a collective, so called on every rank whatever its flags say).
  const tj::dist::WorldLayout layout = tj::dist::world_layout(static_cast<int>(make_towers(f).size()));
  if (f.decay_steps == 0) {  // the whole run's applies: steps, times the towers when each applies
    const int64_t towers = layout.towers();
    // Async across processes: rank 0 serves the variables, and its own towers stay idle.
    const int64_t applying = world.size() > 1 ? towers - layout.towers_of_rank[0] : towers;
    const int64_t per_epoch = tj::data::batches_per_epoch(
        train_set.size(), {.batch = f.step_batch(), .drop_last = f.drop_last, .min_batch = towers * f.accumulate});
    f.decay_steps = f.total_steps(per_epoch) * (f.strategy == "async" ? applying : 1);
  }
  // Opened before training, so a bad path fails now rather than after an epoch.
  tj::report::Trace trace(lead ? f.trace : "");

  tj::Graph graph;
  tj::GraphScope use(graph);
  auto image = tj::input("image", {tj::kBatch, 784});
  auto label = tj::input("label", {tj::kBatch}, tj::DType::i32);
  auto logits = f.model == "cnn"      ? examples::cnn(image)
                : f.model == "resnet" ? examples::resnet(image)
                                      : examples::mlp(image, f.hidden);
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, label));

  const tj::Towers towers = make_towers(f);
  tj::dist::check_agreement(shared_flags(f, run_metadata(f, towers)));
  towers.slices(f.batch);  // more towers than examples in a batch: say so before compiling
  std::optional<tj::ExponentialMovingAverage> ema;
  if (f.ema > 0) ema = tj::ExponentialMovingAverage{.decay = f.ema};
  tj::TowerTrainerOptions options{.seed = f.seed, .ema = ema, .logits = logits};
  if (f.gradient_compression != "off")
    options.strategy.gradient_compression = *tj::dtype_from_name(f.gradient_compression);  // bf16 or f16
  tj::TowerTrainer trainer(graph, loss, towers, make_optimizer(f), options);
  trainer.set_trace(&trace);

  // Under mpirun a checkpoint also records the world (and resumes over another one).
  auto metadata = run_metadata(f, towers);
  if (world.size() > 1) {
    metadata["world"] = std::to_string(world.size()) + " processes, " +
                        std::to_string(trainer.world_layout().towers()) + " towers";
    metadata["towers"] = "rank 0: " + towers.str();
    metadata["strategy"] = f.strategy;
  }
  tj::data::PipelinePosition start;
  if (f.resume) start = tj::resume_from(trainer, f.checkpoint, metadata);
  // Each rank reads only its towers' rows of every batch (the same shuffle everywhere).
  const int world_towers = trainer.world_layout().towers();
  tj::data::BatchPipeline pipeline(
      train_set,
      {.batch = f.step_batch(), .seed = f.seed, .drop_last = f.drop_last, .min_batch = world_towers * f.accumulate,
       .transform = f.augment ? tj::data::augment({.crop_pad = 2, .flip = true, .height = 28, .width = 28,
                                                   .seed = f.seed})
                              : nullptr,
       .part = world.size() > 1 ? std::function([&](int64_t n) { return trainer.own_rows(n); }) : nullptr},
      start);
  const int64_t per_epoch = pipeline.batches_per_epoch();
  const int64_t start_step = start.epoch * per_epoch + start.batch;
  const int64_t total = f.total_steps(per_epoch);
  // A resumed run continues its metrics file from the checkpoint's step.
  std::optional<tj::report::MetricsWriter> metrics;
  if (lead && !f.metrics.empty() && f.resume) metrics.emplace(f.metrics, start_step, tj::Loc::current());
  if (lead && !f.metrics.empty() && !f.resume) metrics.emplace(f.metrics, tj::Loc::current());
  // --tensorboard: the same records as event files, written by rank 0 alone.
  std::optional<tj::report::TensorBoardWriter> tensorboard;
  if (lead && !f.tensorboard.empty()) tensorboard.emplace(f.tensorboard, tj::Loc::current());
  tj::report::MetricsTee sinks({metrics ? &*metrics : nullptr, tensorboard ? &*tensorboard : nullptr});
  tj::report::MetricsSink* const logged = sinks.empty() ? nullptr : &sinks;

  if (world.size() > 1 && lead)
    std::printf("towerjit: %d processes over %s, %d towers in all\n", world.size(), world.name().c_str(), world_towers);
  if (lead) std::printf("towerjit: %s on %s, %s, %s, batch %s, %lld epoch(s)%s\n", metadata.at("model").c_str(),
              towers.str().c_str(), f.strategy.c_str(), make_optimizer(f).str().c_str(),
              metadata.at("batch").c_str(), static_cast<long long>(f.epochs),
              f.resume ? (", resumed at step " + std::to_string(start_step)).c_str() : "");
  tj::report::Progress progress(total);
  tj::LogHook log(progress, logged, f.log_every);
  tj::EvalHook eval(test_set, progress, logged, f.ema > 0, f.eval_every);
  std::optional<tj::CheckpointHook> save;
  if (lead && !f.checkpoint.empty()) save.emplace(checkpoint_dir(f), metadata, f.checkpoint_every, 3, tj::Loc::current());
  if (save && !f.keep_best.empty())
    save->keep_best(eval, f.keep_best == "loss" ? tj::BestBy::test_loss : tj::BestBy::test_accuracy);
  std::vector<tj::Hook*> hooks;
  if (lead) hooks = {&log, &eval};  // eval before save: the best checkpoint reads its result
  if (save) hooks.push_back(&*save);
  std::optional<tj::HistogramHook> histograms;  // --histogram-every, into rank 0's event file
  if (tensorboard && f.histogram_every > 0) histograms.emplace(graph, *tensorboard, f.histogram_every, tj::Loc::current());
  if (histograms) hooks.push_back(&*histograms);

  const int64_t payload_before = world.payload_bytes();
  tj::StepEvent last;
  try {
    last = tj::fit(trainer, pipeline, {.epochs = f.fit_epochs(), .max_steps = f.steps, .hooks = hooks,
                                       .accumulate = f.accumulate});
  } catch (const tj::Interrupted& stop) {
    // Ctrl-C or SIGTERM: fit finished the step and wrote the final checkpoint; say where the
    // run stopped and the command that continues it, and exit as a program stopped by it does.
    // Under mpirun every rank stopped after the same step; rank 0 speaks for them.
    if (!lead) return stop.exit_code();
    progress.finish();
    std::fprintf(stderr, "%s\n", stop.what());
    if (save && world.size() > 1)
      std::fprintf(stderr, "to resume: mpirun (any -np) %s\n", resume_command.c_str());
    else if (save) std::fprintf(stderr, "to resume: %s\n", resume_command.c_str());
    else std::fprintf(stderr, "to be able to resume a run, give it --checkpoint DIR\n");
    if (metrics) tj::report::write_metrics_plots(metrics->path());
    trace.close();
    return stop.exit_code();
  }
  if (!lead) return 0;
  progress.finish();
  std::printf("test accuracy %.4f, test loss %.4f\n", eval.last().accuracy, eval.last().loss);
  if (world.size() > 1 && last.step > start_step)
    std::printf("mpi: rank 0 handed %.0f bytes per step to collectives over %s\n",
                static_cast<double>(world.payload_bytes() - payload_before) / static_cast<double>(last.step - start_step),
                world.name().c_str());
  if (f.strategy == "async") {
    const auto staleness = trainer.async_report();
    std::printf("async: %lld applies, staleness mean %.2f, max %lld; largest lead of a tower %lld\n",
                static_cast<long long>(staleness.applies), staleness.mean_staleness,
                static_cast<long long>(staleness.max_staleness), static_cast<long long>(staleness.max_lead));
  }
  if (save) std::printf("checkpoint: %s\n", save->last_path().c_str());
  if (!f.export_safetensors.empty()) {  // the weights evaluated above: the EMA's with --ema
    tj::save_safetensors(trainer, f.export_safetensors, {.ema = f.ema > 0, .metadata = {{"model", metadata.at("model")}}});
    std::printf("safetensors: %s\n", f.export_safetensors.c_str());
  }
  if (!f.export_onnx.empty()) {  // with the weights the evaluation used (the EMA's under --ema)
    tj::export_onnx(trainer, f.export_onnx, {.ema_weights = f.ema > 0});
    std::printf("onnx: %s (docs/interop.md runs it in onnxruntime)\n", f.export_onnx.c_str());
  }
  if (save && !save->best_path().empty())
    std::printf("best checkpoint: %s (test %s %.4f at step %lld)\n", save->best_path().c_str(), f.keep_best.c_str(),
                save->best_value(), static_cast<long long>(save->best_step()));
  if (metrics) {
    for (const auto& path : tj::report::write_metrics_plots(metrics->path())) std::printf("plot: %s\n", path.c_str());
  }
  trace.close();
  if (trace.enabled()) std::printf("trace: %s (open it at ui.perfetto.dev)\n", f.trace.c_str());
  return 0;
}

// This run's command line with --resume (unless it has it), quoted for a POSIX shell: what
// continues it after an interrupt, from the final checkpoint.
std::string resume_command(int argc, char** argv) {
  auto quoted = [](const std::string& arg) {
    if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                              "_-+=.,/:@%") == std::string::npos)
      return arg;
    std::string out = "'";
    for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  };
  std::string command;
  bool has_resume = false;
  for (int i = 0; i < argc; ++i) {
    has_resume = has_resume || std::string(argv[i]) == "--resume";
    command += (i ? " " : "") + quoted(argv[i]);
  }
  return has_resume ? command : command + " --resume";
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Train a model on Fashion-MNIST over towers (CPU or GPU)"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag wins
  app.add_option("--model", f.model,
                 "mlp (784-H-H-10), cnn (2x conv3x3+ReLU+maxpool, dense 128, dense 10) or resnet (2x conv+BN "
                 "and a residual block, maxpool; dropout, dense 10)")
      ->check(CLI::IsMember({"mlp", "cnn", "resnet"}));
  app.add_option("--towers", f.towers, "devices, e.g. cpu:0,cpu:1 or gpu:0,gpu:1 (default: every GPU present, else cpu:0,cpu:1)");
  app.add_option("--strategy", f.strategy, "sync (weighted average, replicated), sync-ps (parameter server) or async")
      ->check(CLI::IsMember({"sync", "sync-ps", "async"}));
  app.add_option("--optimizer", f.optimizer, "adam, momentum (0.9) or sgd")
      ->check(CLI::IsMember({"momentum", "sgd", "adam"}));
  app.add_option("--lr", f.lr, "learning rate (the peak, under a schedule)");
  app.add_option("--lr-schedule", f.lr_schedule,
                 "constant, cosine (to 0), exponential (to 1%) or piecewise (/10 at half the run, /100 at 3/4)")
      ->check(CLI::IsMember({"constant", "cosine", "exponential", "piecewise"}));
  app.add_option("--warmup-steps", f.warmup_steps, "raise the rate linearly over the first N applies")
      ->check(at_least(0, "0: no warmup"));
  app.add_option("--max-staleness", f.max_staleness,
                 "with --strategy async: no tower runs more than K applies ahead of the slowest (default: no bound)")
      ->check(at_least(0, "0: no tower ahead of the slowest"));
  app.add_option("--decay-steps", f.decay_steps, "the schedule's length in applies (default: the whole run)")
      ->check(at_least(0, "0: the whole run"));
  app.add_option("--batch", f.batch, "examples per step, split over the towers");
  app.add_option("--accumulate", f.accumulate,
                 "apply once per N batches of --batch (gradient accumulation: one step on N x --batch examples)")
      ->check(at_least(1, "1: one apply per batch"));
  app.add_option("--epochs", f.epochs, "passes over the training set");
  app.add_option("--steps", f.steps, "stop after this many steps (alone: as many epochs as they take)");
  app.add_option("--seed", f.seed, "initial weights and the shuffle");
  app.add_option("--hidden", f.hidden, "units in each of the MLP's two hidden layers");
  app.add_option("--ema", f.ema, "keep moving averages of the weights with this decay (e.g. 0.999) and evaluate with them");
  app.add_option("--data", f.data, "a directory in MNIST's layout");
  app.add_option("--data-npz", f.data_npz,
                 "an .npz archive with x_train, y_train, x_test, y_test (as Keras' fashion_mnist.npz), in place of --data");
  app.add_option("--export-safetensors", f.export_safetensors,
                 "after training, write the weights (the EMA's with --ema) as safetensors under PyTorch's names");
  app.add_option("--dump", f.dump, "write each compiled program's CUDA C, PTX, LLVM IR, kernel IR and index here (tower_step, apply, predict, ...)");
  app.add_option("--checkpoint", f.checkpoint,
                 "write checkpoints to this directory after every epoch (with --resume: a directory or a checkpoint file)");
  app.add_option("--checkpoint-every", f.checkpoint_every, "also checkpoint every N steps");
  app.add_option("--eval-every", f.eval_every, "also evaluate on the test set every N steps")
      ->check(CLI::Validator(
          [](std::string& v) {
            return v.find('-') == std::string::npos ? std::string()
                                                    : "must be 0 (after each epoch only) or a number of steps";
          },
          "N >= 0"));
  app.add_option("--eval-examples", f.eval_examples, "evaluate on the test set's first N examples only (default: all)")
      ->check(at_least(1, "the test set's first N examples"));
  app.add_flag("--resume", f.resume,
               "continue from --checkpoint: a file, or a directory's newest checkpoint (an older one if it is damaged)");
  app.add_option("--metrics", f.metrics, "write JSON lines of step and evaluation metrics (and SVG plots next to it)");
  auto* tensorboard = app.add_option("--tensorboard", f.tensorboard, "write TensorBoard event files of the same metrics to DIR");
  app.add_option("--histogram-every", f.histogram_every, "with --tensorboard, histograms of the weights every N steps")
      ->check(CLI::PositiveNumber)
      ->needs(tensorboard);
  app.add_option("--log-every", f.log_every,
                 "log every N steps to the metrics file (and, when the output is not a terminal, as a plain line)");
  app.add_flag("--augment", f.augment, "augment the training images: random crop (zero padding 2) and horizontal flip");
  app.add_option("--keep-best", f.keep_best,
                 "with --checkpoint, also keep best.tjck: the checkpoint of the best test accuracy or loss")
      ->check(CLI::IsMember({"accuracy", "loss"}));
  app.add_option("--trace", f.trace, "write a Chrome/Perfetto trace of the towers' work");
  app.add_option("--export-onnx", f.export_onnx,
                 "after training, write the model's inference program (batch norm on its moving statistics, no "
                 "dropout) as an ONNX file, with the EMA weights under --ema (docs/interop.md)");
  app.add_flag("--drop-last", f.drop_last, "drop each epoch's last partial batch");
  app.add_flag("--check-numerics", f.check_numerics,
               "stop at the first op whose output holds a NaN or an infinity, naming it (TOWERJIT_CHECK_NUMERICS=on)");
  app.add_option("--precision", f.precision,
                 "f32, bf16 or f16: matrix products take bf16 or f16 operands with f32 accumulation, the weights "
                 "stay f32; f16 scales the loss dynamically (CPU towers; docs/dsl.md)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--gradient-compression", f.gradient_compression,
                 "off, bf16 or f16: sync gradients cross processes (mpirun), and GPUs through NCCL with "
                 "TOWERJIT_GPU_VARIABLES=on, rounded to 16 bits and summed in them, half the bytes (Horovod's "
                 "Compression.fp16; docs/distributed.md)")
      ->check(CLI::IsMember({"off", "bf16", "f16"}));
  CLI11_PARSE(app, argc, argv);
  f.epochs_given = app.count("--epochs") > 0;
  if (f.resume && f.checkpoint.empty()) {
    std::fprintf(stderr, "fashion_mnist: --resume needs --checkpoint DIR (the directory to resume from)\n");
    return 2;
  }
  if (f.max_staleness >= 0 && f.strategy != "async") {
    std::fprintf(stderr, "fashion_mnist: --max-staleness needs --strategy async (sync towers are never stale)\n");
    return 2;
  }
  if (!f.keep_best.empty() && f.checkpoint.empty()) {
    std::fprintf(stderr, "fashion_mnist: --keep-best needs --checkpoint DIR (where best.tjck goes)\n");
    return 2;
  }
  if (!f.resume && std::filesystem::is_regular_file(f.checkpoint)) {
    std::fprintf(stderr, "fashion_mnist: --checkpoint %s is a file; add --resume to continue from it, or name a "
                         "directory to write checkpoints to\n", f.checkpoint.c_str());
    return 2;
  }
  try {
    return train(f, resume_command(argc, argv));
  } catch (const tj::Error& e) {
    // Under mpirun: the message names this rank, then every rank stops (none waits for this one).
    const std::string rank = tj::dist::rank_prefix(), message = e.what();
    const bool named = rank.empty() || message.rfind("towerjit: " + rank, 0) == 0;
    std::fprintf(stderr, "%s%s\n", named ? "" : ("towerjit: " + rank).c_str(), message.c_str());
    tj::dist::abort_world_on_error(1);
    return 1;
  }
}
