#include "runtime/report/metrics.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>

#include "dsl/error.h"

namespace towerjit::report {
namespace {

// Shortest text that reads back to the same double; null where JSON has no spelling.
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  return std::string(buf, end);
}

// A flat JSON object's values: numbers, null (NaN) and strings; booleans read as 0 and 1.
// Enough for the lines we write; nested values are rejected.
struct FlatObject {
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> strings;
};

class LineParser {
 public:
  explicit LineParser(std::string_view text) : s_(text) {}

  // False with `error_` set when the line is not one flat object.
  bool parse(FlatObject& out) {
    if (!take('{')) return fail("expected '{'");
    if (take('}')) return at_end();
    do {
      std::string key;
      if (!string(key)) return false;
      if (!take(':')) return fail("expected ':' after \"" + key + "\"");
      skip_space();
      if (peek() == '"') {
        std::string value;
        if (!string(value)) return false;
        out.strings[key] = value;
      } else if (!number_or_literal(out.numbers[key])) {
        return false;
      }
    } while (take(','));
    if (!take('}')) return fail("expected ',' or '}'");
    return at_end();
  }
  const std::string& error() const { return error_; }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool take(char c) {
    skip_space();
    if (peek() != c) return false;
    ++i_;
    return true;
  }
  bool at_end() {
    skip_space();
    return i_ == s_.size() || fail("unexpected text after the object");
  }
  bool fail(const std::string& why) {
    error_ = why + " at column " + std::to_string(i_ + 1);
    return false;
  }
  bool string(std::string& out) {
    if (!take('"')) return fail("expected a string");
    for (; i_ < s_.size() && s_[i_] != '"'; ++i_) {
      if (s_[i_] != '\\') {
        out += s_[i_];
        continue;
      }
      if (++i_ == s_.size()) break;
      const char* from = "\"\\/bfnrt";
      const char* to = "\"\\/\b\f\n\r\t";
      const char* hit = std::strchr(from, s_[i_]);
      if (hit == nullptr || *hit == '\0') return fail("unsupported escape in a string");
      out += to[hit - from];
    }
    if (i_ == s_.size()) return fail("unterminated string");
    ++i_;
    return true;
  }
  bool number_or_literal(double& out) {
    for (auto [word, value] : {std::pair{"null", std::numeric_limits<double>::quiet_NaN()},
                               std::pair{"true", 1.0}, std::pair{"false", 0.0}}) {
      if (s_.substr(i_, std::strlen(word)) == word) {
        i_ += std::strlen(word);
        out = value;
        return true;
      }
    }
    // from_chars also reads "nan" and "inf", which are not JSON: a number starts with a digit.
    const size_t digit = i_ + (peek() == '-');
    if (digit >= s_.size() || s_[digit] < '0' || s_[digit] > '9') return fail("expected a number, null or a string");
    const auto [end, ec] = std::from_chars(s_.data() + i_, s_.data() + s_.size(), out);
    if (ec != std::errc() || end == s_.data() + i_) return fail("expected a number, null or a string");
    i_ = static_cast<size_t>(end - s_.data());
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
  std::string error_;
};

}  // namespace

std::FILE* open_report_file(const std::string& path, std::string_view what, Loc loc) {
  user_check(!path.empty(), loc) << "the " << what << " path is empty; give a file name";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f != nullptr) return f;
  const int err = errno;
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  std::string fix;
  if (err == ENOENT && !dir.empty() && !fs::is_directory(dir, ec))
    fix = "the directory \"" + dir.string() + "\" does not exist; create it first (mkdir -p " +
          dir.string() + ")";
  else if (err == EISDIR)
    fix = "it is a directory; give a file name inside it";
  else if (err == ENOTDIR)
    fix = "a part of the path is a file, not a directory";
  else if (err == EACCES || err == EPERM || err == EROFS)
    fix = "choose a location you can write to";
  user_check(false, loc) << "cannot write the " << what << " \"" << path << "\": " << std::strerror(err)
                         << (fix.empty() ? "" : "; " + fix);
  return nullptr;
}

struct MetricsWriter::Lock {
  std::mutex mutex;
};

MetricsWriter::MetricsWriter(const std::string& path, Loc loc)
    : path_(path), file_(open_report_file(path, "metrics file", loc)), lock_(std::make_unique<Lock>()) {}

MetricsWriter::MetricsWriter(const std::string& path, int64_t resumed_at, Loc loc)
    : path_(path), lock_(std::make_unique<Lock>()) {
  MetricsLog kept;
  if (std::filesystem::exists(path)) kept = read_metrics(path, loc);
  file_ = open_report_file(path, "metrics file", loc);
  // Rewritten in step order, each evaluation after the step it followed.
  size_t e = 0;
  auto flush_evals_until = [&](int64_t step) {
    for (; e < kept.evals.size() && kept.evals[e].step <= step; ++e)
      if (kept.evals[e].step <= resumed_at) log_eval(kept.evals[e], loc);
  };
  for (const StepRecord& r : kept.steps) {
    if (r.step > resumed_at) break;
    flush_evals_until(r.step - 1);
    log_step(r, loc);
  }
  flush_evals_until(resumed_at);
}

MetricsTee::MetricsTee(std::vector<MetricsSink*> sinks) {
  for (MetricsSink* s : sinks)
    if (s != nullptr) sinks_.push_back(s);
}

void MetricsTee::log_step(const StepRecord& record, Loc loc) {
  for (MetricsSink* s : sinks_) s->log_step(record, loc);
}

void MetricsTee::log_eval(const EvalRecord& record, Loc loc) {
  for (MetricsSink* s : sinks_) s->log_eval(record, loc);
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::log_step(const StepRecord& r, Loc loc) {
  write_line("{\"kind\":\"step\",\"step\":" + std::to_string(r.step) + ",\"epoch\":" + std::to_string(r.epoch) +
                 ",\"loss\":" + json_number(r.loss) + ",\"lr\":" + json_number(r.lr) +
                 ",\"samples_per_s\":" + json_number(r.samples_per_s) +
                 (std::isnan(r.staleness) ? "" : ",\"staleness\":" + json_number(r.staleness)) +
                 (std::isnan(r.loss_scale) ? "" : ",\"loss_scale\":" + json_number(r.loss_scale)) +
                 (r.skipped_steps < 0 ? "" : ",\"skipped_steps\":" + std::to_string(r.skipped_steps)) + "}\n",
             loc);
}

void MetricsWriter::log_eval(const EvalRecord& r, Loc loc) {
  write_line("{\"kind\":\"eval\",\"step\":" + std::to_string(r.step) + ",\"epoch\":" + std::to_string(r.epoch) +
                 ",\"test_accuracy\":" + json_number(r.test_accuracy) +
                 ",\"test_loss\":" + json_number(r.test_loss) + "}\n",
             loc);
}

void MetricsWriter::write_line(const std::string& line, Loc loc) {
  std::lock_guard lock(lock_->mutex);
  // Flushing per line costs one write() per logged step, nothing next to a training step, and
  // a reader (or a crash) sees every line that was logged.
  errno = 0;
  const bool ok = std::fputs(line.c_str(), file_) >= 0 && std::fflush(file_) == 0;
  const int err = errno;
  user_check(ok, loc) << "cannot write the metrics file \"" << path_ << "\": "
                      << (err != 0 ? std::strerror(err) : "write failed") << "; is the disk full?";
}

MetricsLog read_metrics(const std::string& path, Loc loc) {
  std::ifstream in(path);
  user_check(in.good(), loc) << "cannot read the metrics file \"" << path << "\": " << std::strerror(errno)
                             << "; give the path a MetricsWriter (the examples' --metrics) wrote";
  MetricsLog log;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    FlatObject o;
    LineParser parser(line);
    const bool parsed = parser.parse(o);
    user_check(parsed, loc) << "\"" << path << "\" line " << number << " is not a metrics record ("
                            << parser.error() << "): " << line;
    const std::string kind = o.strings.count("kind") ? o.strings["kind"] : "";
    const std::vector<std::string> keys =
        kind == "step" ? std::vector<std::string>{"step", "epoch", "loss", "lr", "samples_per_s"}
                       : std::vector<std::string>{"step", "epoch", "test_accuracy", "test_loss"};
    user_check(kind == "step" || kind == "eval", loc)
        << "\"" << path << "\" line " << number << " has no \"kind\" of \"step\" or \"eval\": " << line;
    for (const auto& key : keys)
      user_check(o.numbers.count(key), loc)
          << "\"" << path << "\" line " << number << " lacks \"" << key << "\": " << line;
    auto& n = o.numbers;
    // A hand-edited null step must not become undefined behaviour in the cast.
    const auto whole = [&](const char* key) { return std::isfinite(n[key]) ? static_cast<int64_t>(n[key]) : -1; };
    if (kind == "step")
      log.steps.push_back({whole("step"), whole("epoch"), n["loss"], n["lr"], n["samples_per_s"],
                           n.count("staleness") ? n["staleness"] : std::numeric_limits<double>::quiet_NaN(),
                           n.count("loss_scale") ? n["loss_scale"] : std::numeric_limits<double>::quiet_NaN(),
                           n.count("skipped_steps") ? whole("skipped_steps") : -1});
    else
      log.evals.push_back({whole("step"), whole("epoch"), n["test_accuracy"], n["test_loss"]});
  }
  return log;
}

}  // namespace towerjit::report
