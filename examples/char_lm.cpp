// Trains a GPT-style character model (examples/gpt.h) over towers on a text corpus and reports
// its held-out loss, perplexity and token accuracy beside the unigram model's, then samples
// text from it through the inference program.
//
//   ./build/examples/char_lm                                  # the licences in /usr/share/common-licenses, 2 CPU towers
//   ./build/examples/char_lm --corpus book.txt --steps 2000 --layers 4 --dim 128
//   ./build/examples/char_lm --steps 600 --checkpoint runs/lm && ./build/examples/char_lm --steps 900 --checkpoint runs/lm --resume
//   TOWERJIT_CUDA=emulator TOWERJIT_EMULATED_GPUS=2 ./build/examples/char_lm --towers gpu:0,gpu:1 --steps 40
//
// The corpus is split into a training part and a held-out part (the last --held-out share of
// every file). Training windows of --context characters start every --context / 2 characters;
// the targets are the next characters. fit() drives the loop; TokenEvalHook scores the held-out
// windows per token.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <random>

#include "examples/char_corpus.h"
#include "examples/gpt.h"
#include "runtime/dist/world.h"
#include "runtime/towers/token_eval_hook.h"
#include "towerjit.h"

namespace tj = towerjit;

namespace {

struct Flags {
  std::string corpus = examples::kLicenseCorpus;
  double held_out = 0.1;
  std::string towers = "cpu:0,cpu:1";
  std::string strategy = "sync";
  std::string optimizer = "adam";
  std::string precision = "f32";  // "bf16" / "f16": every matmul takes such operands (f32 masters)
  double lr = 3e-3;
  int64_t batch = 32;
  int64_t steps = 500;
  int64_t epochs = 1;
  bool epochs_given = false;
  examples::GptConfig model{.context = 64, .dim = 64, .heads = 4, .layers = 2};
  uint64_t seed = 1;
  int64_t log_every = 50, eval_every = 0, checkpoint_every = 0;
  std::string dump, checkpoint, metrics;
  bool resume = false;
  int64_t sample = 300;
  double temperature = 0.8;
  std::string prompt = "This License ";
  std::optional<int64_t> fit_epochs() const {
    return steps > 0 && !epochs_given ? std::nullopt : std::optional<int64_t>(epochs);
  }
};

tj::Optimizer make_optimizer(const Flags& f) {
  tj::Optimizer o = f.optimizer == "sgd"        ? tj::sgd(f.lr)
                    : f.optimizer == "momentum" ? tj::momentum(f.lr, 0.9)
                                                : tj::adam(f.lr);
  // f16 products need the loss scaled, or small gradients round to zero (dsl/loss_scale.h).
  return f.precision == "f16" ? o.with_loss_scale() : o;
}

tj::Towers make_towers(const Flags& f) {
  auto towers = tj::Towers(tj::parse_devices(f.towers));
  if (f.precision != "f32")
    towers = towers.precision({.matmul_operands = *tj::dtype_from_name(f.precision)});  // checked by the flag
  if (f.strategy == "async") return towers.reduce(tj::AsyncApply{});
  if (f.strategy == "sync-ps") return towers.variant(tj::SyncVariant::parameter_server);
  // The token table applied from each tower's own gradient, the rest averaged (Towers::with;
  // the table is tied to the output, so its gradient is dense: a small one may follow a rule).
  if (f.strategy == "sync-async-embed") return towers.with(tj::variables("tok/*"), tj::AsyncApply{});
  return towers;
}

// What must agree between a checkpoint and the run resuming it.
std::map<std::string, std::string> run_metadata(const Flags& f, const examples::CharCorpus& corpus) {
  return {{"model", f.model.str()},
          {"corpus", f.corpus + " (" + std::to_string(corpus.train.size()) + " characters to train on)"},
          {"optimizer", make_optimizer(f).str()},
          {"batch", std::to_string(f.batch)},
          {"seed", std::to_string(f.seed)}};
}

// Where checkpoints go: --checkpoint's directory, or the directory of the checkpoint it names.
std::string checkpoint_dir(const std::string& checkpoint) {
  if (!std::filesystem::is_regular_file(checkpoint)) return checkpoint;
  const std::filesystem::path parent = std::filesystem::path(checkpoint).parent_path();
  return parent.empty() ? "." : parent.string();
}

// `count` characters after `prompt`, each drawn from the model's next-character distribution
// at `temperature` (0: the most likely), through the trainer's inference program. The window
// is the last T characters; a shorter one is padded on the right, which a causal model's
// earlier positions never see.
std::string sample(tj::TowerTrainer& trainer, const examples::CharCorpus& corpus, const Flags& f) {
  const int64_t T = f.model.context, V = corpus.vocab();
  std::vector<int32_t> text;
  for (unsigned char b : f.prompt)
    if (corpus.id_of[b] >= 0) text.push_back(corpus.id_of[b]);
  if (text.empty()) text.push_back(0);
  std::mt19937 rng(static_cast<uint32_t>(f.seed));
  std::uniform_real_distribution<double> uniform(0, 1);
  std::string out;
  for (int64_t n = 0; n < f.sample; ++n) {
    const int64_t first = std::max<int64_t>(0, static_cast<int64_t>(text.size()) - T);
    const int64_t used = static_cast<int64_t>(text.size()) - first;
    tj::HostTensor window({1, T}, tj::DType::i32);
    for (int64_t t = 0; t < T; ++t) window.i32[t] = t < used ? text[first + t] : text.back();
    const tj::HostTensor logits = trainer.predict({{"tokens", window}});
    const float* row = &logits.f32[(used - 1) * V];
    int32_t next = static_cast<int32_t>(std::max_element(row, row + V) - row);
    if (f.temperature > 0) {
      std::vector<double> p(V);
      double sum = 0;
      for (int64_t c = 0; c < V; ++c) sum += p[c] = std::exp((row[c] - row[next]) / f.temperature);
      double u = uniform(rng) * sum;
      for (int64_t c = 0; c < V; ++c)
        if ((u -= p[c]) <= 0 || c == V - 1) {
          next = static_cast<int32_t>(c);
          break;
        }
    }
    text.push_back(next);
    out += static_cast<char>(corpus.alphabet[next]);
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int train(const Flags& f) {
  // Under mpirun every rank trains its towers; rank 0 alone prints, evaluates, logs metrics,
  // dumps, writes checkpoints and samples (as fashion_mnist's).
  const bool lead = tj::dist::world().rank() == 0;
  tj::set_compile_options({.dump_dir = lead ? f.dump : ""});
  const examples::CharCorpus corpus = examples::load_corpus(f.corpus, f.held_out);
  examples::GptConfig config = f.model;
  config.vocab = corpus.vocab();
  const tj::data::TensorDataset train_set(examples::windows(corpus.train, corpus, config.context, config.context / 2));
  const tj::data::TensorDataset held_out(examples::windows(corpus.held_out, corpus, config.context, config.context),
                                         "targets");
  if (held_out.size() == 0)
    throw tj::Error("char_lm: the held-out text (" + std::to_string(corpus.held_out.size()) +
                    " characters) is shorter than a window of --context " + std::to_string(config.context) +
                    " + 1; raise --held-out or give a longer --corpus");

  tj::Graph graph;
  tj::GraphScope use(graph);
  auto tokens = tj::input("tokens", {tj::kBatch, config.context}, tj::DType::i32);
  auto targets = tj::input("targets", {tj::kBatch, config.context}, tj::DType::i32);
  auto logits = examples::gpt(tokens, config);
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, targets));
  const tj::Towers towers = make_towers(f);
  towers.slices(f.batch);  // more towers than examples in a batch: say so before compiling
  const int model_nodes = graph.size();  // the forward pass and the loss, before autodiff
  const auto building = std::chrono::steady_clock::now();
  tj::TowerTrainer trainer(graph, loss, towers, make_optimizer(f), {.seed = f.seed, .logits = logits});
  const double compile_seconds = seconds_since(building);

  const auto metadata = run_metadata(f, corpus);
  tj::data::PipelinePosition start;
  if (f.resume) start = tj::resume_from(trainer, f.checkpoint, metadata);
  tj::data::BatchPipeline pipeline(train_set, {.batch = f.batch, .seed = f.seed, .min_batch = towers.size()}, start);
  const int64_t per_epoch = pipeline.batches_per_epoch();
  const int64_t total = f.steps > 0 && !f.epochs_given ? f.steps : f.epochs * per_epoch;
  if (!lead) {  // train alongside rank 0, quietly
    tj::fit(trainer, pipeline, {.epochs = f.fit_epochs(), .max_steps = f.steps});
    return 0;
  }
  std::printf("towerjit: %s (%d graph nodes, loss included) on %s, %s, %s, batch %lld\n", config.str().c_str(),
              model_nodes, towers.str().c_str(), f.strategy.c_str(),
              make_optimizer(f).str().c_str(), static_cast<long long>(f.batch));
  std::printf("corpus: %zu files, %zu characters to train on (%lld windows), %zu held out (%lld windows), %lld "
              "distinct characters\n",
              corpus.files.size(), corpus.train.size(), static_cast<long long>(train_set.size()), corpus.held_out.size(),
              static_cast<long long>(held_out.size()), static_cast<long long>(config.vocab));
  const double unigram = examples::unigram_loss(corpus, held_out.labels());
  const auto before = tj::evaluate_tokens(trainer, held_out.inputs(), held_out.labels());
  std::printf("held-out loss %.4f at step %lld (unigram model: %.4f)\n", before.loss,
              static_cast<long long>(start.epoch * per_epoch + start.batch), unigram);

  std::optional<tj::report::MetricsWriter> metrics;
  if (!f.metrics.empty()) metrics.emplace(f.metrics, tj::Loc::current());
  tj::report::MetricsSink* logged = metrics ? &*metrics : nullptr;
  tj::report::Progress progress(total);
  tj::LogHook log(progress, logged, f.log_every);
  tj::TokenEvalHook eval(held_out, progress, logged, {.every = f.eval_every});
  std::optional<tj::CheckpointHook> save;
  if (!f.checkpoint.empty()) save.emplace(checkpoint_dir(f.checkpoint), metadata, f.checkpoint_every, 3, tj::Loc::current());
  std::vector<tj::Hook*> hooks{&log, &eval};
  if (save) hooks.push_back(&*save);

  const auto started = std::chrono::steady_clock::now();
  const tj::StepEvent last = tj::fit(trainer, pipeline, {.epochs = f.fit_epochs(), .max_steps = f.steps, .hooks = hooks});
  const double seconds = seconds_since(started);
  progress.finish();
  const tj::TokenEvaluation& r = eval.last();
  std::printf("trained to step %lld in %.1f s (and %.1f s building and compiling the trainer)\n",
              static_cast<long long>(last.step), seconds, compile_seconds);
  std::printf("held-out loss %.4f, perplexity %.3f, token accuracy %.4f over %lld characters\n", r.loss, r.perplexity,
              r.accuracy, static_cast<long long>(r.tokens));
  std::printf("unigram model (train counts, add-one): held-out loss %.4f, perplexity %.3f\n", unigram, std::exp(unigram));
  if (save) std::printf("checkpoint: %s\n", save->last_path().c_str());
  if (f.sample > 0) {
    std::printf("sample (temperature %.2f, seed %llu) after \"%s\":\n%s%s\n", f.temperature,
                static_cast<unsigned long long>(f.seed), f.prompt.c_str(), f.prompt.c_str(), sample(trainer, corpus, f).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Train a GPT-style character model over towers (CPU or GPU) and sample from it"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--corpus", f.corpus, "a text file, or a directory of them (default: the licences of Debian's base-files)");
  app.add_option("--held-out", f.held_out, "the share of every file held out for evaluation")->check(CLI::Range(0.01, 0.5));
  app.add_option("--towers", f.towers, "devices, e.g. cpu:0,cpu:1 or gpu:0,gpu:1");
  app.add_option("--strategy", f.strategy,
                 "sync (weighted average, replicated), sync-ps (parameter server), async, or sync-async-embed (the "
                 "token table applied from each tower's gradient, the rest averaged)")
      ->check(CLI::IsMember({"sync", "sync-ps", "async", "sync-async-embed"}));
  app.add_option("--optimizer", f.optimizer, "adam, momentum (0.9) or sgd")->check(CLI::IsMember({"adam", "momentum", "sgd"}));
  app.add_option("--lr", f.lr, "learning rate");
  app.add_option("--precision", f.precision,
                 "f32, bf16 or f16: matrix products take bf16 or f16 operands with f32 accumulation, the weights "
                 "stay f32; f16 scales the loss dynamically (CPU towers; docs/dsl.md)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--batch", f.batch, "windows per step, split over the towers")->check(CLI::PositiveNumber);
  app.add_option("--steps", f.steps, "stop after this many steps (0: --epochs whole epochs)")->check(CLI::NonNegativeNumber);
  app.add_option("--epochs", f.epochs, "passes over the training windows (with --steps: the most it may take)")
      ->check(CLI::PositiveNumber);
  app.add_option("--context", f.model.context, "characters a window holds (T)")->check(CLI::PositiveNumber);
  app.add_option("--dim", f.model.dim, "the model's width (D)")->check(CLI::PositiveNumber);
  app.add_option("--heads", f.model.heads, "attention heads (must divide --dim)")->check(CLI::PositiveNumber);
  app.add_option("--layers", f.model.layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--seed", f.seed, "initial weights, the shuffle and the sampling");
  app.add_option("--log-every", f.log_every, "log every N steps");
  app.add_option("--eval-every", f.eval_every, "also evaluate on the held-out text every N steps (0: at the end)");
  app.add_option("--dump", f.dump, "write each compiled program's LLVM IR / CUDA C, kernel IR and index here");
  app.add_option("--checkpoint", f.checkpoint, "write checkpoints to this directory (with --resume: a directory or a file)");
  app.add_option("--checkpoint-every", f.checkpoint_every, "also checkpoint every N steps");
  app.add_flag("--resume", f.resume, "continue from --checkpoint");
  app.add_option("--metrics", f.metrics, "write JSON lines of step and evaluation metrics");
  app.add_option("--sample", f.sample, "characters to sample at the end (0: none)")->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", f.temperature, "sampling temperature (0: always the most likely character)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prompt", f.prompt, "the text the sample continues");
  CLI11_PARSE(app, argc, argv);
  f.epochs_given = app.count("--epochs") > 0;
  if (f.model.dim % f.model.heads != 0) {
    std::fprintf(stderr, "char_lm: --dim %lld must divide by --heads %lld\n", static_cast<long long>(f.model.dim),
                 static_cast<long long>(f.model.heads));
    return 2;
  }
  if (f.resume && f.checkpoint.empty()) {
    std::fprintf(stderr, "char_lm: --resume needs --checkpoint DIR (the directory to resume from)\n");
    return 2;
  }
  try {
    return train(f);
  } catch (const tj::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
