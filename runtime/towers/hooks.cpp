#include "runtime/towers/hooks.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "dsl/error.h"
#include "runtime/checkpoint/checkpoint_format.h"
#include "runtime/dist/world.h"

namespace towerjit {
namespace {

bool epoch_ends(const StepEvent& e) { return e.batch_in_epoch + 1 == e.batches_per_epoch; }

std::string format(const char* fmt, auto... args) {
  char text[256];
  std::snprintf(text, sizeof text, fmt, args...);
  return text;
}

}  // namespace

LogHook::LogHook(report::Progress& progress, report::MetricsWriter* metrics, int64_t every)
    : progress_(progress), metrics_(metrics), every_(std::max<int64_t>(1, every)) {}

void LogHook::after_step(TowerTrainer&, const StepEvent& e) {
  loss_sum_ += e.loss * e.examples;
  examples_ += e.examples;
  seconds_ += e.examples / e.samples_per_s;
  progress_.update(e.epoch + 1, e.step, e.loss, e.samples_per_s);
  if (metrics_ && e.step % every_ == 0)
    metrics_->log_step({.step = e.step, .epoch = e.epoch + 1, .loss = e.loss, .lr = e.learning_rate,
                        .samples_per_s = e.samples_per_s});
}

void LogHook::after_epoch(TowerTrainer&, const StepEvent& e) {
  progress_.line(format("epoch %lld: %lld steps, train loss %.4f, %.0f samples/s",
                        static_cast<long long>(e.epoch + 1), static_cast<long long>(e.batches_per_epoch),
                        examples_ ? loss_sum_ / examples_ : 0.0, seconds_ > 0 ? examples_ / seconds_ : 0.0));
  loss_sum_ = seconds_ = 0;
  examples_ = 0;
}

EvalHook::EvalHook(const data::Dataset& test, report::Progress& progress, report::MetricsWriter* metrics,
                   bool ema_weights, int64_t every)
    : test_(test), test_images_{{"image", test.images}}, progress_(progress), metrics_(metrics),
      ema_weights_(ema_weights), every_(every) {}

void EvalHook::after_step(TowerTrainer& trainer, const StepEvent& e) {
  if (every_ > 0 && e.step % every_ == 0) evaluate(trainer, e);
}

void EvalHook::after_epoch(TowerTrainer& trainer, const StepEvent& e) {
  if (e.step != evaluated_at_) evaluate(trainer, e);
}

void EvalHook::end(TowerTrainer& trainer, const StepEvent& last) {
  if (last.step != evaluated_at_ && last.step > 0) evaluate(trainer, last);
}

bool EvalHook::uses_trainer_at(const StepEvent& e) const {
  return epoch_ends(e) || (every_ > 0 && e.step % every_ == 0);
}

void EvalHook::evaluate(TowerTrainer& trainer, const StepEvent& e) {
  last_ = trainer.evaluate(test_images_, test_.labels, ema_weights_);
  evaluated_at_ = e.step;
  progress_.line(format("epoch %lld, step %lld: test accuracy %.4f, test loss %.4f%s",
                        static_cast<long long>(e.epoch + 1), static_cast<long long>(e.step),
                        last_.accuracy, last_.loss, ema_weights_ ? " (EMA weights)" : ""));
  if (metrics_)
    metrics_->log_eval({.step = e.step, .epoch = e.epoch + 1, .test_accuracy = last_.accuracy,
                        .test_loss = last_.loss});
}

CheckpointHook::CheckpointHook(std::string dir, std::map<std::string, std::string> metadata,
                               int64_t every, int keep, Loc loc)
    : dir_(std::move(dir)), metadata_(std::move(metadata)), every_(every), keep_(keep), loc_(loc) {}

void CheckpointHook::begin(TowerTrainer&, const data::PipelinePosition&) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  const std::string probe = dir_ + "/.towerjit-write-probe";
  std::FILE* f = ec ? nullptr : std::fopen(probe.c_str(), "wb");
  const std::string reason = ec ? ec.message() : f ? "" : std::strerror(errno);
  user_check(f != nullptr, loc_) << "cannot write checkpoints to \"" << dir_ << "\": " << reason
                                 << "; choose a checkpoint directory you can write";
  std::fclose(f);
  std::filesystem::remove(probe, ec);
}

void CheckpointHook::after_step(TowerTrainer& trainer, const StepEvent& e) {
  if (every_ > 0 && e.step % every_ == 0) save(trainer, e);
}

void CheckpointHook::after_epoch(TowerTrainer& trainer, const StepEvent& e) { save(trainer, e); }

void CheckpointHook::end(TowerTrainer& trainer, const StepEvent& last) {
  if (last.step != saved_at_ && last.step > 0) save(trainer, last);
}

std::string CheckpointHook::kept_state() const {
  return last_path_.empty() ? "what " + dir_ + " held before this run" : "the newest checkpoint, " + last_path_ + ",";
}

bool CheckpointHook::uses_trainer_at(const StepEvent& e) const {
  return epoch_ends(e) || (every_ > 0 && e.step % every_ == 0);
}

namespace {
constexpr const char* kAppliesKey = "optimizer_applies";
}  // namespace

void CheckpointHook::save(TowerTrainer& trainer, const StepEvent& e) {
  if (e.step == saved_at_) return;
  // Named by the training step, as a sync run's are; async towers apply several times a step,
  // so the apply count (the global step the optimiser reads) is kept beside it.
  std::map<std::string, std::string> metadata = metadata_;
  metadata[kAppliesKey] = std::to_string(trainer.applies());
  last_path_ = save_checkpoint(dir_, {.step = e.step, .position = e.next, .variables = trainer.variables(),
                                      .metadata = metadata},
                               keep_, loc_);
  saved_at_ = e.step;
}

namespace {

// The checkpoint at `path`: read by this process alone, or, in a world of several, by rank 0,
// which sends its bytes (or why it could not read them) to every rank, so every rank raises the
// same error or resumes from the same bytes.
Checkpoint load_for_world(const std::string& path, Loc loc) {
  dist::Transport& world = dist::world(loc);
  if (world.size() == 1) return load_checkpoint(path, loc);
  std::string bytes, error;
  if (world.rank() == 0) {
    try {
      bytes = "C" + encode_checkpoint(load_checkpoint(path, loc), loc);
    } catch (const Error& e) {
      bytes = "E" + std::string(e.what());
    }
  }
  std::vector<char> sent(bytes.begin(), bytes.end());
  try {
    world.broadcast(sent, 0);
  } catch (const std::runtime_error& e) {
    user_check(false, loc) << dist::rank_prefix() << "receiving checkpoint " << path << " from rank 0 failed: " << e.what();
  }
  user_check(!sent.empty() && sent[0] == 'C', loc)
      << dist::rank_prefix() << "rank 0 could not read checkpoint " << path << ": "
      << std::string(sent.begin() + (sent.empty() ? 0 : 1), sent.end());
  return decode_checkpoint(std::string_view(sent.data() + 1, sent.size() - 1), path + " (from rank 0)", loc);
}

}  // namespace

data::PipelinePosition resume_from(TowerTrainer& trainer, const std::string& path,
                                   const std::map<std::string, std::string>& metadata, Loc loc) {
  const Checkpoint checkpoint = load_for_world(path, loc);
  // A checkpoint of a run over several processes (or resumed by one) reshards: the towers and
  // the world may differ, the sync step does not depend on them.
  const bool reshards = metadata.count("world") || checkpoint.metadata.count("world");
  for (const auto& [key, value] : metadata) {
    if (reshards && (key == "towers" || key == "world")) continue;
    auto it = checkpoint.metadata.find(key);
    user_check(it == checkpoint.metadata.end() || it->second == value, loc)
        << dist::rank_prefix() << "checkpoint " << path << " was written by a run with " << key << " = \"" << it->second
        << "\", this run has " << key << " = \"" << value << "\"; resume with the same settings "
        << "or start a new checkpoint directory";
  }
  check_matches(checkpoint, trainer.variables(), loc);
  // Checkpoints written before the apply count was recorded are sync ones: one apply a step.
  int64_t applies = checkpoint.step;
  if (const auto it = checkpoint.metadata.find(kAppliesKey); it != checkpoint.metadata.end()) {
    char* end = nullptr;
    applies = std::strtoll(it->second.c_str(), &end, 10);
    user_check(!it->second.empty() && *end == '\0' && applies >= 0, loc)
        << "checkpoint " << path << ": its " << kAppliesKey << " \"" << it->second
        << "\" is not a count of applies; the file is damaged: resume from an earlier checkpoint";
  }
  trainer.restore(checkpoint.variables, applies, loc);
  return checkpoint.position;
}

}  // namespace towerjit
