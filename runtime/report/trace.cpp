#include "runtime/report/trace.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "dsl/error.h"
#include "runtime/interop/json_subset.h"
#include "runtime/report/metrics.h"

namespace towerjit::report {
namespace {

std::string microseconds(Trace::Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", std::chrono::duration<double, std::micro>(d).count());
  return buf;
}

std::string args_json(const TraceArgs& args) {
  std::string out = "{";
  for (const auto& [key, value] : args) {
    if (out.size() > 1) out += ',';
    out.append(json::quote(key)).append(":").append(value.json());
  }
  return out + "}";
}

}  // namespace

TraceValue::TraceValue(double v) {
  // JSON has no NaN or Infinity; an argument is only displayed, so a string says what it was.
  if (!std::isfinite(v)) {
    json_ = std::isnan(v) ? "\"nan\"" : v > 0 ? "\"inf\"" : "\"-inf\"";
    return;
  }
  char buf[32];
  json_.assign(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}
TraceValue::TraceValue(int64_t v) : json_(std::to_string(v)) {}
TraceValue::TraceValue(std::string_view v) : json_(json::quote(v)) {}

struct Trace::Impl {
  std::string path;
  Clock::time_point origin = Clock::now();
  std::mutex mutex;
  std::FILE* file = nullptr;  // null once closed
  bool first = true;          // no event written yet (no comma before the next)
  int write_error = 0;        // the first failed write's errno, reported by close()

  // One event, formatted by the caller outside the lock: threads only queue on the write.
  void put(const std::string& event) {
    std::lock_guard lock(mutex);
    if (file == nullptr) return;
    errno = 0;
    if (std::fputs(first ? "\n" : ",\n", file) < 0 || std::fputs(event.c_str(), file) < 0)
      if (write_error == 0) write_error = errno != 0 ? errno : EIO;
    first = false;
  }
  std::string head(std::string_view phase, std::string_view name, std::string_view category, int tid) const {
    std::string e = "{\"name\":" + json::quote(name);
    if (!category.empty()) e += ",\"cat\":" + json::quote(category);
    return e + ",\"ph\":\"" + std::string(phase) + "\",\"pid\":1,\"tid\":" + std::to_string(tid);
  }
};

Trace::Trace() = default;

Trace::Trace(const std::string& path, Loc loc) {
  if (path.empty()) return;
  impl_ = std::make_unique<Impl>();
  impl_->path = path;
  impl_->file = open_report_file(path, "trace file", loc);
  // Events are small and many (several per tower per step): a large buffer keeps write()
  // calls rare.
  std::setvbuf(impl_->file, nullptr, _IOFBF, 1 << 16);
  std::fputs("{\"traceEvents\":[", impl_->file);
  impl_->put(impl_->head("M", "process_name", "", 0) + ",\"args\":{\"name\":\"towerjit\"}}");
}

Trace::~Trace() {
  try {
    close();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
}

Trace::Trace(Trace&&) noexcept = default;

Trace& Trace::operator=(Trace&& other) noexcept {
  if (this != &other) {
    Trace old(std::move(*this));  // closes the file this trace had, when it goes
    impl_ = std::move(other.impl_);
  }
  return *this;
}

void Trace::name_thread(int tid, std::string_view name) {
  if (impl_ == nullptr) return;
  impl_->put(impl_->head("M", "thread_name", "", tid) + ",\"args\":{\"name\":" + json::quote(name) + "}}");
  impl_->put(impl_->head("M", "thread_sort_index", "", tid) + ",\"args\":{\"sort_index\":" + std::to_string(tid) +
             "}}");
}

void Trace::begin(Span& s, std::string_view name, std::string_view category, int tid, TraceArgs args) {
  s.open_.reset(new Span::Open{impl_.get(), std::string(name), std::string(category), tid, Clock::now(),
                               std::move(args)});
}

void Trace::Span::finish() {
  const auto end = Clock::now();
  const Open& o = *open_;
  o.impl->put(o.impl->head("X", o.name, o.category, o.tid) + ",\"ts\":" + microseconds(o.start - o.impl->origin) +
              ",\"dur\":" + microseconds(end - o.start) + ",\"args\":" + args_json(o.args) + "}");
  open_.reset();
}

void Trace::complete(std::string_view name, std::string_view category, int tid, Clock::time_point start,
                     Clock::time_point end, TraceArgs args) {
  if (impl_ == nullptr) return;
  impl_->put(impl_->head("X", name, category, tid) + ",\"ts\":" + microseconds(start - impl_->origin) +
             ",\"dur\":" + microseconds(std::max(end - start, Clock::duration::zero())) +
             ",\"args\":" + args_json(args) + "}");
}

void Trace::instant(std::string_view name, std::string_view category, int tid, TraceArgs args) {
  if (impl_ == nullptr) return;
  impl_->put(impl_->head("i", name, category, tid) + ",\"s\":\"t\",\"ts\":" +
             microseconds(Clock::now() - impl_->origin) + ",\"args\":" + args_json(args) + "}");
}

void Trace::counter(std::string_view name, double value) {
  // A counter track cannot show a non-finite value, and JSON cannot hold one: leave a gap.
  if (impl_ == nullptr || !std::isfinite(value)) return;
  impl_->put(impl_->head("C", name, "", 0) + ",\"ts\":" + microseconds(Clock::now() - impl_->origin) +
             ",\"args\":{\"value\":" + TraceValue(value).json() + "}}");
}

void Trace::close(Loc loc) {
  if (impl_ == nullptr) return;
  std::lock_guard lock(impl_->mutex);
  if (impl_->file == nullptr) return;
  errno = 0;
  if (std::fputs("\n],\"displayTimeUnit\":\"ms\"}\n", impl_->file) < 0 && impl_->write_error == 0)
    impl_->write_error = errno != 0 ? errno : EIO;
  if (std::fclose(impl_->file) != 0 && impl_->write_error == 0) impl_->write_error = errno != 0 ? errno : EIO;
  impl_->file = nullptr;
  user_check(impl_->write_error == 0, loc) << "cannot write the trace file \"" << impl_->path
                                           << "\": " << std::strerror(impl_->write_error) << "; is the disk full?";
}

}  // namespace towerjit::report
