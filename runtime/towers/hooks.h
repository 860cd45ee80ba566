// Ready-made hooks for fit(): progress and metrics logging, evaluation on a held-out set, and
// checkpoints. Each does one thing; the examples combine them.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/directory_lock.h"
#include "runtime/checkpoint/precision_change.h"
#include "runtime/data/fashion_mnist.h"
#include "runtime/data/tensor_dataset.h"
#include "runtime/report/metrics.h"
#include "runtime/report/progress.h"
#include "runtime/towers/fit.h"

namespace towerjit {

// Every `every` steps: a metrics line (when `metrics` is set; with an async strategy it carries
// the mean staleness of the applies since the previous line, with loss scaling the scale and
// the skipped steps) and the progress bar; when the
// progress is not interactive (output to a pipe or a log file), a plain line instead of the bar:
//
//   step 10, epoch 1: loss 0.8034, 15210 samples/s, lr 0.001
//
// After each epoch: a plain line with the epoch's mean training loss and throughput.
class LogHook : public Hook {
 public:
  LogHook(report::Progress& progress, report::MetricsSink* metrics, int64_t every = 10);
  void after_step(TowerTrainer&, const StepEvent& e) override;
  void after_epoch(TowerTrainer&, const StepEvent& e) override;
  bool uses_trainer_at(const StepEvent&) const override { return false; }

 private:
  report::Progress& progress_;
  report::MetricsSink* metrics_;
  int64_t every_;
  double loss_sum_ = 0, seconds_ = 0;  // over the epoch so far
  int64_t examples_ = 0;
  int64_t async_applies_ = 0;  // the trainer's async applies and their staleness summed, at the last record
  double async_sum_ = 0;
};

// After each epoch, every `every` steps (0: only after epochs) and at the end when training
// stops elsewhere: the test set's accuracy and loss through trainer.evaluate(), printed and
// logged, once per step at most; with `ema_weights`, with the EMA shadows instead of the
// trained variables.
class EvalHook : public Hook {
 public:
  // Fashion-MNIST's Dataset: its images fed as "image", scored against its labels.
  EvalHook(const data::Dataset& test, report::Progress& progress, report::MetricsSink* metrics,
           bool ema_weights = false, int64_t every = 0);
  // A dataset of your own: every array but the label fed under its name, scored against the
  // label array (TensorDataset's label name). Errors (at `loc`): a dataset without labels, or
  // labels that are not i32 [N] class indices.
  EvalHook(const data::TensorDataset& test, report::Progress& progress, report::MetricsSink* metrics,
           bool ema_weights = false, int64_t every = 0, Loc loc = Loc::current());
  void after_step(TowerTrainer& trainer, const StepEvent& e) override;
  void after_epoch(TowerTrainer& trainer, const StepEvent& e) override;
  void end(TowerTrainer& trainer, const StepEvent& last) override;
  bool uses_trainer_at(const StepEvent& upcoming) const override;
  const TowerTrainer::Evaluation& last() const { return last_; }
  // The step last() was evaluated at (-1: none yet), and whether with the EMA weights.
  int64_t evaluated_at() const { return evaluated_at_; }
  bool ema_weights() const { return ema_weights_; }

 private:
  void evaluate(TowerTrainer& trainer, const StepEvent& e);
  const HostFeeds test_inputs_;  // the feeds evaluate() takes, built once (31 MB for Fashion-MNIST)
  const HostTensor test_labels_;
  report::Progress& progress_;
  report::MetricsSink* metrics_;
  bool ema_weights_;
  int64_t every_;
  int64_t evaluated_at_ = -1;  // the step of the last evaluation
  TowerTrainer::Evaluation last_;
};

// The evaluation metric a best checkpoint is kept by.
enum class BestBy {
  test_accuracy,  // higher is better
  test_loss,      // lower is better
};

// Writes a checkpoint (every variable, the apply count, the pipeline's position, `metadata`)
// every `every` steps (0: never mid-epoch), after each epoch and at the end, keeping the
// newest `keep`. Before training starts it creates `dir` and checks it can write there, so a
// bad path fails before any work is done, and takes the directory's lock (DirectoryLock,
// runtime/checkpoint/directory_lock.h) until end(): a second run saving to the same directory
// fails in its begin(), naming the first one's pid. Holding the lock, it removes the temporary
// files a crashed writer left. A failed write (a full disk: ENOSPC, a file-size limit: EFBIG)
// raises towerjit::Error (at `loc`) naming the file, the system's reason, the step and the
// checkpoint that is kept; the previous checkpoints and `latest` stay as they were.
//
// With keep_best(eval, metric) it also keeps the best checkpoint by an EvalHook's metric:
// whenever `eval` has just evaluated (the same step) and the metric beats the best so far, the
// variables are written atomically to <dir>/best.tjck (never rotated out by `keep`), with the
// metric in its metadata: "best_metric" ("test_accuracy" or "test_loss"), "best_value",
// "best_step", "best_weights" ("ema" or "trained", the weights the evaluation used).
class CheckpointHook : public Hook {
 public:
  CheckpointHook(std::string dir, std::map<std::string, std::string> metadata, int64_t every = 0,
                 int keep = 3, Loc loc = Loc::current());
  void begin(TowerTrainer&, const data::PipelinePosition&) override;
  void after_step(TowerTrainer& trainer, const StepEvent& e) override;
  void after_epoch(TowerTrainer& trainer, const StepEvent& e) override;
  void end(TowerTrainer& trainer, const StepEvent& last) override;
  bool uses_trainer_at(const StepEvent& upcoming) const override;
  std::string kept_state() const override;
  const std::string& last_path() const { return last_path_; }

  // Also keep <dir>/best.tjck by `eval`'s `metric`. `eval` must come before this hook in
  // FitOptions::hooks, so its evaluation of a step is done when this hook sees the step (an
  // error at the first epoch's end says so otherwise). A resumed run (begin() at a position
  // other than the start) continues from the best value recorded in an existing best.tjck
  // kept by the same metric; a fresh run replaces it.
  void keep_best(const EvalHook& eval, BestBy metric = BestBy::test_accuracy);
  // The best checkpoint's path (empty: none written yet by this run), its value and step.
  const std::string& best_path() const { return best_path_; }
  double best_value() const { return best_value_; }
  int64_t best_step() const { return best_step_; }

 private:
  void save(TowerTrainer& trainer, const StepEvent& e);
  void consider_best(TowerTrainer& trainer, const StepEvent& e);
  std::string dir_;
  std::map<std::string, std::string> metadata_;
  int64_t every_;
  int keep_;
  int64_t saved_at_ = -1;
  std::string last_path_;
  Loc loc_;
  DirectoryLock lock_;
  const EvalHook* best_of_ = nullptr;
  BestBy best_by_ = BestBy::test_accuracy;
  bool have_best_ = false;
  double best_value_ = 0;
  int64_t best_step_ = -1;
  int64_t best_considered_at_ = -1;
  std::string best_path_;
};

// "test_accuracy" or "test_loss".
const char* best_by_name(BestBy metric);

// Restores a trainer from a checkpoint (a file, or a directory's latest): checks that the
// variables match the model and that `metadata` agrees with the checkpoint's on every key
// both have (e.g. a run of another model or batch size), then restores the variables and the
// apply count. Returns the pipeline position to resume from. Errors name the mismatch.
// In a world of several processes (runtime/dist/world.h) rank 0 reads the checkpoint and
// broadcasts it, and every rank checks it (a mismatch, or a file rank 0 cannot read, is an
// error on every rank); when the run's or the checkpoint's metadata has a "world" key, the
// "towers" and "world" keys are not compared, so a checkpoint resumes over another number of
// processes (the pipeline position is global). Collective then: every rank calls it.
// A variable the checkpoint holds in another float precision than the model (f32, bf16, f16)
// is converted with a warning naming it (runtime/checkpoint/precision_change.h), unless
// `precision` is CheckpointPrecision::exact, which refuses it.
data::PipelinePosition resume_from(TowerTrainer& trainer, const std::string& path,
                                   const std::map<std::string, std::string>& metadata,
                                   Loc loc = Loc::current());
data::PipelinePosition resume_from(TowerTrainer& trainer, const std::string& path,
                                   const std::map<std::string, std::string>& metadata, CheckpointPrecision precision,
                                   Loc loc = Loc::current());

}  // namespace towerjit
