// TensorBoard event files (`--tensorboard DIR`): `tensorboard --logdir DIR` shows a run's
// scalars (and, when asked for, histograms) as PyTorch's SummaryWriter's would.
//
//   towerjit::report::TensorBoardWriter tb("runs/tb");
//   tb.scalar("train/loss", step, loss);
//   tb.log_step(record);   // or as a MetricsSink next to a MetricsWriter (MetricsTee)
//
// The file is DIR/events.out.tfevents.<unix seconds>.<host>.<pid>.<n> (the pid and a per-process
// count keep two writers started in the same second apart, as SummaryWriter does). Each record
// is an Event message (runtime/report/tensorboard_event.proto, encoded by protobuf) framed as
// TFRecord: the length (u64, little-endian), the masked CRC-32C of those 8 bytes, the message,
// the masked CRC-32C of the message. The first record names the format ("brain.Event:2").
//
// Records are buffered and flushed every `flush_seconds` by a thread of the writer's (so a
// record logged before a long evaluation reaches the disk during it), by flush() and at
// destruction: a run killed with SIGKILL keeps all but its last seconds, and a reader skips a
// truncated last record. Across processes only rank 0 writes: a writer built
// with another rank creates nothing and ignores every call. Thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "runtime/report/metrics.h"

namespace towerjit::report {

class TensorBoardWriter : public MetricsSink {
 public:
  // Creates `dir` (and its parents) and a new event file in it. Errors (towerjit::Error): the
  // directory cannot be created or the file opened, named with the system's reason and the fix.
  explicit TensorBoardWriter(const std::string& dir, Loc loc = Loc::current());
  // `flush_seconds` <= 0: every record is flushed as written.
  TensorBoardWriter(const std::string& dir, int rank, double flush_seconds, Loc loc = Loc::current());
  ~TensorBoardWriter() override;  // flushes and closes; a failure is reported on stderr
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  bool enabled() const { return file_ != nullptr; }  // false on a rank other than 0
  const std::string& path() const { return path_; }  // empty when not enabled

  // One scalar at `step` (stored as a float, as TensorBoard's scalars are). Errors: the write
  // fails (a full disk), named with the path.
  void scalar(const std::string& tag, int64_t step, double value, Loc loc = Loc::current());
  // A histogram of `values` at `step` in `buckets` equal-width buckets over [min, max]
  // (non-finite values are left out and counted in the tag "<tag>/nonfinite" when any).
  void histogram(const std::string& tag, int64_t step, const std::vector<float>& values, int buckets = 30,
                 Loc loc = Loc::current());

  // The metrics JSON lines' fields as scalars: "train/loss", "train/learning_rate",
  // "train/samples_per_s", "async/staleness" (async strategies), "train/loss_scale" and
  // "train/skipped_steps" (loss scaling); "test/accuracy", "test/loss".
  void log_step(const StepRecord& record, Loc loc = Loc::current()) override;
  void log_eval(const EvalRecord& record, Loc loc = Loc::current()) override;

  void flush(Loc loc = Loc::current());

 private:
  void write_record(const std::string& data, Loc loc);  // under f_->mutex
  void flush_locked(Loc loc);                            // under f_->mutex
  void check(bool ok, Loc loc);
  void flush_every_interval();  // the flusher thread's loop

  std::string path_;
  std::FILE* file_ = nullptr;
  double flush_seconds_;
  bool unflushed_ = false;  // records written since the last flush
  struct Flusher;  // the lock, and the thread that flushes every flush_seconds_ (tensorboard.cpp)
  std::unique_ptr<Flusher> f_;
};

}  // namespace towerjit::report
