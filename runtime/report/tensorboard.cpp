#include "runtime/report/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "dsl/error.h"
#include "runtime/report/crc32c.h"
#include "runtime/report/tensorboard_event.pb.h"

namespace towerjit::report {
namespace {

namespace pb = towerjit::tensorboard;

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

std::atomic<int> files_made{0};  // this process's writers so far: the file name's last part

}  // namespace

struct TensorBoardWriter::Flusher {
  std::mutex mutex;
  std::condition_variable stop;
  bool stopping = false;
  std::thread thread;
};

TensorBoardWriter::TensorBoardWriter(const std::string& dir, Loc loc) : TensorBoardWriter(dir, 0, 2.0, loc) {}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int rank, double flush_seconds, Loc loc)
    : flush_seconds_(flush_seconds), f_(std::make_unique<Flusher>()) {
  if (rank != 0) return;  // SummaryWriter's convention: one process writes a run's events
  user_check(!dir.empty(), loc) << "the TensorBoard directory's path is empty; give a directory, e.g. "
                                   "--tensorboard runs/tb";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  user_check(!ec, loc) << "cannot create the TensorBoard directory \"" << dir << "\": " << ec.message()
                       << "; give a directory you can write to";
  const double now = unix_seconds();
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." +
                                         host_name() + "." + std::to_string(getpid()) + "." +
                                         std::to_string(files_made++)))
              .string();
  file_ = open_report_file(path_, "TensorBoard event file", loc);
  pb::Event first;
  first.set_wall_time(now);
  first.set_file_version("brain.Event:2");
  {
    std::lock_guard lock(f_->mutex);
    write_record(first.SerializeAsString(), loc);
  }
  flush(loc);  // the file is recognisable from the start
  f_->thread = std::thread([this] { flush_every_interval(); });
}

void TensorBoardWriter::flush_every_interval() {
  const auto interval = std::chrono::duration<double>(flush_seconds_);
  std::unique_lock lock(f_->mutex);
  while (!f_->stop.wait_for(lock, interval, [this] { return f_->stopping; }))
    if (unflushed_) {
      // A failure here has no caller to raise to; the next write or the destructor reports it.
      if (std::fflush(file_) == 0) unflushed_ = false;
    }
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ == nullptr) return;
  {
    std::lock_guard lock(f_->mutex);
    f_->stopping = true;
  }
  f_->stop.notify_all();
  f_->thread.join();
  const bool ok = std::fflush(file_) == 0;
  const bool closed = std::fclose(file_) == 0;
  if (!ok || !closed)
    std::fprintf(stderr, "towerjit: cannot finish the TensorBoard event file \"%s\": %s\n", path_.c_str(),
                 std::strerror(errno));
}

void TensorBoardWriter::check(bool ok, Loc loc) {
  const int err = errno;
  user_check(ok, loc) << "cannot write the TensorBoard event file \"" << path_ << "\": "
                      << (err != 0 ? std::strerror(err) : "write failed") << "; is the disk full?";
}

void TensorBoardWriter::write_record(const std::string& data, Loc loc) {
  std::string header;
  put_le(header, data.size(), 8);
  std::string frame = header;
  put_le(frame, masked_crc32c(header.data(), header.size()), 4);
  frame += data;
  put_le(frame, masked_crc32c(data.data(), data.size()), 4);
  errno = 0;
  check(std::fwrite(frame.data(), 1, frame.size(), file_) == frame.size(), loc);
  unflushed_ = true;
  if (flush_seconds_ <= 0) flush_locked(loc);
}

void TensorBoardWriter::flush_locked(Loc loc) {
  errno = 0;
  check(std::fflush(file_) == 0, loc);
  unflushed_ = false;
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value, Loc loc) {
  if (file_ == nullptr) return;
  pb::Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(step);
  auto* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  const std::string data = event.SerializeAsString();
  std::lock_guard lock(f_->mutex);
  write_record(data, loc);
}

void TensorBoardWriter::histogram(const std::string& tag, int64_t step, const std::vector<float>& values,
                                  int buckets, Loc loc) {
  if (file_ == nullptr) return;
  user_check(buckets >= 1, loc) << "a histogram needs at least one bucket, got " << buckets;
  pb::Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(step);
  auto* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  auto* h = v->mutable_histo();
  double lo = INFINITY, hi = -INFINITY, sum = 0, sum_sq = 0, n = 0;
  int64_t nonfinite = 0;
  for (float x : values) {
    if (!std::isfinite(x)) {
      ++nonfinite;
      continue;
    }
    lo = std::min<double>(lo, x), hi = std::max<double>(hi, x), sum += x, sum_sq += double(x) * x, ++n;
  }
  if (n == 0) lo = hi = 0;
  std::vector<double> counts(static_cast<size_t>(buckets), 0.0);
  const double width = hi > lo ? (hi - lo) / buckets : 1.0;
  for (float x : values)
    if (std::isfinite(x)) counts[std::min<size_t>(static_cast<size_t>((x - lo) / width), counts.size() - 1)] += 1;
  h->set_min(lo), h->set_max(hi), h->set_num(n), h->set_sum(sum), h->set_sum_squares(sum_sq);
  for (int b = 0; b < buckets; ++b) {
    h->add_bucket_limit(b + 1 == buckets ? hi : lo + width * (b + 1));
    h->add_bucket(counts[static_cast<size_t>(b)]);
  }
  const std::string data = event.SerializeAsString();
  {
    std::lock_guard lock(f_->mutex);
    write_record(data, loc);
  }
  if (nonfinite > 0) scalar(tag + "/nonfinite", step, static_cast<double>(nonfinite), loc);
}

void TensorBoardWriter::log_step(const StepRecord& r, Loc loc) {
  scalar("train/loss", r.step, r.loss, loc);
  scalar("train/learning_rate", r.step, r.lr, loc);
  scalar("train/samples_per_s", r.step, r.samples_per_s, loc);
  if (!std::isnan(r.staleness)) scalar("async/staleness", r.step, r.staleness, loc);
  if (!std::isnan(r.loss_scale)) scalar("train/loss_scale", r.step, r.loss_scale, loc);
  if (r.skipped_steps >= 0) scalar("train/skipped_steps", r.step, static_cast<double>(r.skipped_steps), loc);
}

void TensorBoardWriter::log_eval(const EvalRecord& r, Loc loc) {
  scalar("test/accuracy", r.step, r.test_accuracy, loc);
  scalar("test/loss", r.step, r.test_loss, loc);
}

void TensorBoardWriter::flush(Loc loc) {
  if (file_ == nullptr) return;
  std::lock_guard lock(f_->mutex);
  flush_locked(loc);
}

}  // namespace towerjit::report
