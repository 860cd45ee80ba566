#include "runtime/report/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace towerjit::report {
namespace {

constexpr int kBarWidth = 20;
constexpr double kRedrawEvery = 0.1;  // seconds

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// "\r" returns to the line's start, "\033[K" erases to its end: a shorter redraw leaves no
// stale characters behind. Every terminal in use understands this ANSI sequence.
constexpr const char* kClearLine = "\r\033[K";

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

// The terminal's width, or 0 when it does not say.
size_t terminal_columns(std::FILE* out) {
  winsize size{};
  return ioctl(fileno(out), TIOCGWINSZ, &size) == 0 ? size.ws_col : 0;
}

// A line as wide as the terminal wraps, and '\r' then returns only to the start of the last
// row, leaving a trail of old bars: drop the bar first, then cut the text.
std::string fit(std::string text, size_t columns) {
  if (columns == 0 || text.size() < columns) return text;
  if (text[0] == '[') text.erase(0, text.find("] ") + 2);
  if (text.size() >= columns) text.resize(columns - 1);
  return text;
}

}  // namespace

Progress::Progress(int64_t total_steps, std::FILE* out)
    : Progress(total_steps, out, isatty(fileno(out)) != 0) {}

Progress::Progress(int64_t total_steps, std::FILE* out, bool interactive)
    : total_(std::max<int64_t>(total_steps, 0)), out_(out), interactive_(interactive) {}

Progress::~Progress() { finish(); }

std::string Progress::render(int64_t epoch, int64_t step, double loss, double samples_per_s,
                             double eta) const {
  std::string text;
  if (total_ > 0) {
    const double done = std::clamp(static_cast<double>(step) / static_cast<double>(total_), 0.0, 1.0);
    const int filled = static_cast<int>(done * kBarWidth);
    text.append("[").append(filled, '#').append(kBarWidth - filled, '.').append("] ");
  }
  char buf[160];
  if (total_ > 0)
    std::snprintf(buf, sizeof buf, "epoch %lld  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %s",
                  static_cast<long long>(epoch), static_cast<long long>(step), static_cast<long long>(total_), loss,
                  samples_per_s, format_eta(eta).c_str());
  else
    std::snprintf(buf, sizeof buf, "epoch %lld  step %lld  loss %.4f  %.0f samples/s", static_cast<long long>(epoch),
                  static_cast<long long>(step), loss, samples_per_s);
  return text + buf;
}

double Progress::eta_seconds() const {
  const int64_t done = step_ - first_step_;
  if (total_ == 0 || done <= 0) return NAN;
  const double elapsed = steady_seconds() - first_time_;
  return elapsed / static_cast<double>(done) * static_cast<double>(std::max<int64_t>(total_ - step_, 0));
}

void Progress::update(int64_t epoch, int64_t step, double loss, double samples_per_s) {
  const double now = steady_seconds();
  if (!started_) started_ = true, first_step_ = step, first_time_ = now;
  epoch_ = epoch, step_ = step, loss_ = loss, samples_per_s_ = samples_per_s;
  if (!interactive_) return;
  pending_ = true;
  // The last step is always drawn, so the bar ends full even when it came fast.
  if (shown_ && now - last_draw_ < kRedrawEvery && !(total_ > 0 && step >= total_)) return;
  draw();
  last_draw_ = now;
}

void Progress::draw() {
  const std::string text = render(epoch_, step_, loss_, samples_per_s_, eta_seconds());
  std::fprintf(out_, "%s%s", kClearLine, fit(text, terminal_columns(out_)).c_str());
  std::fflush(out_);
  shown_ = true;
  pending_ = false;
}

void Progress::line(const std::string& text) {
  if (interactive_ && shown_) std::fputs(kClearLine, out_);
  std::fprintf(out_, "%s\n", text.c_str());
  if (interactive_ && shown_) draw();
  std::fflush(out_);
}

void Progress::finish() {
  if (!interactive_ || !shown_) return;
  if (pending_) draw();
  std::fputc('\n', out_);
  std::fflush(out_);
  shown_ = false;
}

}  // namespace towerjit::report
