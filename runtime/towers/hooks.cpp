#include "runtime/towers/hooks.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "dsl/call_site.h"
#include "dsl/error.h"
#include "runtime/checkpoint/atomic_file.h"
#include "runtime/checkpoint/checkpoint_format.h"
#include "runtime/checkpoint/directory_lock.h"
#include "runtime/dist/checked_transport.h"
#include "runtime/dist/world.h"

namespace towerjit {
namespace {

constexpr const char* kAppliesKey = "optimizer_applies";

bool epoch_ends(const StepEvent& e) { return e.batch_in_epoch + 1 == e.batches_per_epoch; }

// The dataset's label array; without one, TensorDataset::labels' error at `site`, the user's line
// also when std::make_unique made the hook.
const HostTensor& labels_of(const data::TensorDataset& test, const CallSite& site) {
  if (!test.has_labels()) {
    std::string names;
    for (const auto& [name, t] : test.arrays()) names += (names.empty() ? "\"" : ", \"") + name + "\"";
    user_check(false, site) << "the dataset has no label array \"" << test.label_name() << "\" (its arrays: " << names
                            << "); name the label when building it: TensorDataset(arrays, \"<label array>\")";
  }
  return test.labels();
}

std::string format(const char* fmt, auto... args) {
  char text[256];
  std::snprintf(text, sizeof text, fmt, args...);
  return text;
}

}  // namespace

LogHook::LogHook(report::Progress& progress, report::MetricsSink* metrics, int64_t every)
    : progress_(progress), metrics_(metrics), every_(std::max<int64_t>(1, every)) {}

void LogHook::after_step(TowerTrainer& trainer, const StepEvent& e) {
  loss_sum_ += e.loss * e.examples;
  examples_ += e.examples;
  seconds_ += e.examples / e.samples_per_s;
  progress_.update(e.epoch + 1, e.step, e.loss, e.samples_per_s);
  // Without a terminal there is no bar: a plain line now and then, so a log shows progress
  // before the epoch ends.
  const std::optional<TowerTrainer::LossScaleReport> scaling = trainer.loss_scale();
  if (!progress_.interactive() && e.step % every_ == 0)
    progress_.line(format("step %lld, epoch %lld: loss %.4f, %.0f samples/s, lr %.4g",
                          static_cast<long long>(e.step), static_cast<long long>(e.epoch + 1), e.loss,
                          e.samples_per_s, e.learning_rate) +
                   (scaling ? format(", loss scale %g (%lld steps skipped)", scaling->scale,
                                     static_cast<long long>(scaling->skipped_steps))
                            : ""));
  if (metrics_ && e.step % every_ == 0) {
    report::StepRecord record{.step = e.step, .epoch = e.epoch + 1, .loss = e.loss, .lr = e.learning_rate,
                              .samples_per_s = e.samples_per_s};
    if (scaling) record.loss_scale = scaling->scale, record.skipped_steps = scaling->skipped_steps;
    // Async strategies: the mean staleness of the applies since the last record, from the
    // trainer's running totals (the report's mean times its count is the running sum).
    const TowerTrainer::AsyncReport async = trainer.async_report();
    if (async.applies > async_applies_) {
      const double sum = async.mean_staleness * static_cast<double>(async.applies);
      record.staleness = (sum - async_sum_) / static_cast<double>(async.applies - async_applies_);
      async_applies_ = async.applies, async_sum_ = sum;
    }
    metrics_->log_step(record);
  }
}

void LogHook::after_epoch(TowerTrainer&, const StepEvent& e) {
  progress_.line(format("epoch %lld: %lld steps, train loss %.4f, %.0f samples/s",
                        static_cast<long long>(e.epoch + 1), static_cast<long long>(e.batches_per_epoch),
                        examples_ ? loss_sum_ / examples_ : 0.0, seconds_ > 0 ? examples_ / seconds_ : 0.0));
  loss_sum_ = seconds_ = 0;
  examples_ = 0;
}

EvalHook::EvalHook(const data::Dataset& test, report::Progress& progress, report::MetricsSink* metrics,
                   bool ema_weights, int64_t every)
    : test_inputs_{{"image", test.images}}, test_labels_(test.labels), progress_(progress), metrics_(metrics),
      ema_weights_(ema_weights), every_(every) {}

EvalHook::EvalHook(const data::TensorDataset& test, report::Progress& progress, report::MetricsSink* metrics,
                   bool ema_weights, int64_t every, Loc loc)
    : test_inputs_(test.inputs()), test_labels_(labels_of(test, CallSite(loc))), progress_(progress), metrics_(metrics),
      ema_weights_(ema_weights), every_(every) {
  // Made through std::make_unique, `loc` names <bits/unique_ptr.h>: CallSite finds the user's line.
  const CallSite site(loc);
  user_check(test_labels_.dtype == DType::i32 && test_labels_.shape.rank() == 1, site)
      << "EvalHook: the label array \"" << test.label_name() << "\" is " << dtype_name(test_labels_.dtype)
      << test_labels_.shape.str() << "; evaluation scores class indices, i32 [N]";
  user_check(!test_inputs_.empty(), site)
      << "EvalHook: the dataset holds only its label array \"" << test.label_name() << "\"; add the model's inputs";
}

void EvalHook::after_step(TowerTrainer& trainer, const StepEvent& e) {
  if (every_ > 0 && e.step % every_ == 0) evaluate(trainer, e);
}

void EvalHook::after_epoch(TowerTrainer& trainer, const StepEvent& e) {
  if (e.step != evaluated_at_) evaluate(trainer, e);
}

void EvalHook::end(TowerTrainer& trainer, const StepEvent& last) {
  // A run stopped by a signal should stop soon: no pass over the test set.
  if (last.step != evaluated_at_ && last.step > 0 && last.stopped_by == 0) evaluate(trainer, last);
}

bool EvalHook::uses_trainer_at(const StepEvent& e) const {
  return epoch_ends(e) || (every_ > 0 && e.step % every_ == 0);
}

void EvalHook::evaluate(TowerTrainer& trainer, const StepEvent& e) {
  last_ = trainer.evaluate(test_inputs_, test_labels_, ema_weights_);
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

const char* best_by_name(BestBy metric) { return metric == BestBy::test_accuracy ? "test_accuracy" : "test_loss"; }

void CheckpointHook::keep_best(const EvalHook& eval, BestBy metric) {
  best_of_ = &eval;
  best_by_ = metric;
}

void CheckpointHook::begin(TowerTrainer&, const data::PipelinePosition& start) {
  std::error_code ec;
  create_directories_durably(dir_, ec);
  const std::string probe = dir_ + "/.towerjit-write-probe";
  std::FILE* f = ec ? nullptr : std::fopen(probe.c_str(), "wb");
  const std::string reason = ec ? ec.message() : f ? "" : std::strerror(errno);
  user_check(f != nullptr, loc_) << "cannot write checkpoints to \"" << dir_ << "\": " << reason
                                 << "; choose a checkpoint directory you can write";
  std::fclose(f);
  std::filesystem::remove(probe, ec);
  // Held until end(): another run saving here would interleave its files with this one's.
  // Holding it, this run is the only writer, so temporaries a crash left are garbage.
  if (!lock_.held()) lock_ = DirectoryLock(dir_, loc_);
  remove_stale_temporaries(dir_);
  // A resumed run competes with the best its earlier part kept; a fresh run starts over.
  const std::string best = dir_ + "/best.tjck";
  if (best_of_ && start != data::PipelinePosition{} && std::filesystem::exists(best, ec)) {
    const Checkpoint kept = load_checkpoint(best, loc_);
    const auto metric = kept.metadata.find("best_metric"), value = kept.metadata.find("best_value");
    if (metric != kept.metadata.end() && metric->second == best_by_name(best_by_) && value != kept.metadata.end()) {
      have_best_ = true;
      best_value_ = std::stod(value->second);
      const auto step = kept.metadata.find("best_step");
      best_step_ = step == kept.metadata.end() ? -1 : std::stoll(step->second);
    }
  }
}

void CheckpointHook::after_step(TowerTrainer& trainer, const StepEvent& e) {
  if (every_ > 0 && e.step % every_ == 0) save(trainer, e);
  consider_best(trainer, e);
}

void CheckpointHook::after_epoch(TowerTrainer& trainer, const StepEvent& e) {
  // EvalHook evaluates after every epoch: if it has not yet, it runs after this hook.
  user_check(!best_of_ || best_of_->evaluated_at() == e.step, loc_)
      << "CheckpointHook keeps the best checkpoint by the EvalHook's " << best_by_name(best_by_)
      << ", but runs before that EvalHook; list the EvalHook before the CheckpointHook in FitOptions::hooks";
  save(trainer, e);
  consider_best(trainer, e);
}

void CheckpointHook::end(TowerTrainer& trainer, const StepEvent& last) {
  if (last.step != saved_at_ && last.step > 0) save(trainer, last);
  consider_best(trainer, last);
  lock_.release();
}

void CheckpointHook::consider_best(TowerTrainer& trainer, const StepEvent& e) {
  if (!best_of_ || best_of_->evaluated_at() != e.step || best_considered_at_ == e.step) return;
  best_considered_at_ = e.step;
  const double value =
      best_by_ == BestBy::test_accuracy ? best_of_->last().accuracy : best_of_->last().loss;
  const bool better = best_by_ == BestBy::test_accuracy ? value > best_value_ : value < best_value_;
  if (have_best_ && !better) return;  // (a NaN is never better)
  if (!have_best_ && std::isnan(value)) return;
  std::map<std::string, std::string> metadata = metadata_;
  metadata["best_metric"] = best_by_name(best_by_);
  metadata["best_value"] = format("%.17g", value);
  metadata["best_step"] = std::to_string(e.step);
  metadata["best_weights"] = best_of_->ema_weights() ? "ema" : "trained";
  metadata[kAppliesKey] = std::to_string(trainer.applies());  // as save() records it
  best_path_ = dir_ + "/best.tjck";
  write_checkpoint(best_path_, {.step = e.step, .position = e.next, .variables = trainer.variables(),
                                .metadata = std::move(metadata)},
                   loc_);
  have_best_ = true;
  best_value_ = value;
  best_step_ = e.step;
}

std::string CheckpointHook::kept_state() const {
  return last_path_.empty() ? "what " + dir_ + " held before this run" : "the newest checkpoint, " + last_path_ + ",";
}

bool CheckpointHook::uses_trainer_at(const StepEvent& e) const {
  return epoch_ends(e) || (every_ > 0 && e.step % every_ == 0) || (best_of_ && best_of_->uses_trainer_at(e));
}

void CheckpointHook::save(TowerTrainer& trainer, const StepEvent& e) {
  if (e.step == saved_at_) return;
  // Named by the training step, as a sync run's are; async towers apply several times a step,
  // so the apply count (the global step the optimiser reads) is kept beside it.
  std::map<std::string, std::string> metadata = metadata_;
  metadata[kAppliesKey] = std::to_string(trainer.applies());
  try {
    last_path_ = save_checkpoint(dir_, {.step = e.step, .position = e.next, .variables = trainer.variables(),
                                        .metadata = metadata},
                                 keep_, loc_);
  } catch (const Error& failed) {
    // A full disk or a file-size limit: the run stops here, and the user needs to know what
    // survives (the previous checkpoint and `latest`, untouched by the failed write).
    throw Error(std::string(failed.what()) + "; training stopped at step " + std::to_string(e.step) + ": " +
                kept_state() + " is kept");
  }
  saved_at_ = e.step;
}

namespace {

// The checkpoint at `path`: read by this process alone, or, in a world of several, by rank 0,
// which sends its bytes (or why it could not read them) to every rank, so every rank raises the
// same error or resumes from the same bytes.
Checkpoint load_for_world(const std::string& path, Loc loc) {
  dist::Transport& world = dist::world(loc);
  if (world.size() == 1) return load_checkpoint(path, loc);
  const dist::UserCall at(loc);  // names the user's line if the broadcast fails
  std::string bytes, error;
  if (world.rank() == 0) {
    try {
      bytes = "C" + encode_checkpoint(load_checkpoint(path, loc), loc);
    } catch (const Error& e) {
      bytes = "E" + std::string(e.what());
    }
  }
  std::vector<char> sent(bytes.begin(), bytes.end());
  world.broadcast(sent, 0);
  user_check(!sent.empty() && sent[0] == 'C', loc)
      << dist::rank_prefix() << "rank 0 could not read checkpoint " << path << ": "
      << std::string(sent.begin() + (sent.empty() ? 0 : 1), sent.end());
  return decode_checkpoint(std::string_view(sent.data() + 1, sent.size() - 1), path + " (from rank 0)", loc);
}

}  // namespace

data::PipelinePosition resume_from(TowerTrainer& trainer, const std::string& path,
                                   const std::map<std::string, std::string>& metadata, Loc loc) {
  return resume_from(trainer, path, metadata, CheckpointPrecision::convert, loc);
}

data::PipelinePosition resume_from(TowerTrainer& trainer, const std::string& path,
                                   const std::map<std::string, std::string>& metadata, CheckpointPrecision precision,
                                   Loc loc) {
  Checkpoint checkpoint = load_for_world(path, loc);
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
  if (precision == CheckpointPrecision::convert) {
    const std::vector<PrecisionChange> changes = convert_precision(checkpoint, trainer.variables());
    if (!changes.empty() && dist::world(loc).rank() == 0)
      std::fprintf(stderr,
                   "towerjit: warning: checkpoint %s holds %zu variable%s in another precision than the model, "
                   "read converted: %s; resume_from(..., CheckpointPrecision::exact) refuses such a checkpoint\n",
                   path.c_str(), changes.size(), changes.size() == 1 ? "" : "s", describe(changes).c_str());
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
