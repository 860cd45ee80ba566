// Training metrics as JSON lines (`--metrics FILE`): one object per logged step and one per
// evaluation, each flushed as written, so a crashed run keeps what it logged and `tail -f`,
// `jq` or pandas can read the file while training runs:
//
//   {"kind":"step","step":12,"epoch":1,"loss":0.5013,"lr":0.001,"samples_per_s":16014.2}
//   {"kind":"step","step":22,"epoch":1,"loss":0.4902,"lr":0.001,"samples_per_s":17002.9,"staleness":1.05}
//   {"kind":"step","step":32,"epoch":1,"loss":0.4811,"lr":0.001,"samples_per_s":16230.1,"loss_scale":32768,"skipped_steps":1}
//   {"kind":"eval","step":469,"epoch":1,"test_accuracy":0.8488,"test_loss":0.417}
//
// Numbers are written in the shortest form that reads back to the same double. JSON has no
// NaN or Infinity, so a non-finite value (a diverged loss) is written as `null`, which jq,
// browsers and Python all accept; it reads back as NaN (the sign of an infinity is lost).
#pragma once

#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

namespace towerjit {
using Loc = std::source_location;
}

namespace towerjit::report {

struct StepRecord {
  int64_t step = 0;  // the global step, counted over all epochs
  int64_t epoch = 0;
  double loss = 0;
  double lr = 0;
  double samples_per_s = 0;
  // Async strategies only (else NaN, and the key is not written): the mean number of applies by
  // other towers between a tower's read of the variables and its apply, over the applies since
  // the previous record.
  double staleness = std::numeric_limits<double>::quiet_NaN();
  // With loss scaling only (else NaN and -1, and the keys are not written): the scale after the
  // step, and the steps skipped so far for an infinite or NaN gradient.
  double loss_scale = std::numeric_limits<double>::quiet_NaN();
  int64_t skipped_steps = -1;
};

struct EvalRecord {
  int64_t step = 0;  // the global step the evaluation followed
  int64_t epoch = 0;
  double test_accuracy = 0;
  double test_loss = 0;
};

// Where LogHook and EvalHook send a run's metrics: the JSON lines (MetricsWriter), TensorBoard
// event files (TensorBoardWriter, tensorboard.h), or several at once (MetricsTee).
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void log_step(const StepRecord& record, Loc loc = Loc::current()) = 0;
  virtual void log_eval(const EvalRecord& record, Loc loc = Loc::current()) = 0;
};

// Sends each record to every sink given (null ones skipped), in order.
class MetricsTee : public MetricsSink {
 public:
  explicit MetricsTee(std::vector<MetricsSink*> sinks);
  void log_step(const StepRecord& record, Loc loc = Loc::current()) override;
  void log_eval(const EvalRecord& record, Loc loc = Loc::current()) override;
  bool empty() const { return sinks_.empty(); }

 private:
  std::vector<MetricsSink*> sinks_;
};

class MetricsWriter : public MetricsSink {
 public:
  // Creates (or truncates) `path`. Errors (towerjit::Error): the path cannot be opened; the
  // message names it, the system's reason, and the fix (a missing directory: create it).
  explicit MetricsWriter(const std::string& path, Loc loc = Loc::current());
  // For a run resumed at step `resumed_at`: keeps the records of `path` up to that step (when
  // the file exists), drops the later ones an interrupted run wrote, and appends from there.
  // Errors: as above, and a file that is not a metrics file.
  MetricsWriter(const std::string& path, int64_t resumed_at, Loc loc = Loc::current());
  ~MetricsWriter() override;
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Each writes one line and flushes it; safe to call from several threads. Errors: the write
  // fails (a full disk), named with the path.
  void log_step(const StepRecord& record, Loc loc = Loc::current()) override;
  void log_eval(const EvalRecord& record, Loc loc = Loc::current()) override;

  const std::string& path() const { return path_; }

 private:
  void write_line(const std::string& line, Loc loc);

  std::string path_;
  std::FILE* file_ = nullptr;
  struct Lock;  // a std::mutex (metrics.cpp): write_line may be called from several threads
  std::unique_ptr<Lock> lock_;
};

struct MetricsLog {
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
};

// Reads a file MetricsWriter wrote (blank lines and unknown keys are ignored; `null` reads as
// NaN). Errors: the file cannot be read; a line that is not such an object (named by line
// number, with its text).
MetricsLog read_metrics(const std::string& path, Loc loc = Loc::current());

// Opens `path` for writing for the report writers (metrics, plots, traces), or throws
// towerjit::Error naming `what` ("metrics file"), the path, strerror and the likely fix.
std::FILE* open_report_file(const std::string& path, std::string_view what, Loc loc);

}  // namespace towerjit::report
