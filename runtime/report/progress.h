// A live progress line for a training loop. On a terminal, update() redraws one line in place
// with '\r' (at most about 10 times a second, so printing never slows training):
//
//   [##..................] epoch 1  step 180/1407  loss 0.5013  16014 samples/s  ETA 0:09
//
// A terminal too narrow for the line gets it without the bar, then cut, since a wrapped line
// cannot be redrawn in place.
// When the output is not a terminal (a pipe, a log file, CI) update() prints nothing, so the
// log holds only the plain lines the caller prints with line(). Not thread-safe: call it from
// the training loop's thread. No errors are raised; output failures are ignored, as for printf.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace towerjit::report {

class Progress {
 public:
  // `total_steps`: the steps of the whole run, or 0 if unknown (no bar, no ETA). Interactive
  // (the redrawn line) when `out` is a terminal.
  explicit Progress(int64_t total_steps = 0, std::FILE* out = stdout);
  Progress(int64_t total_steps, std::FILE* out, bool interactive);
  ~Progress();  // finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `step` is the global step (counted over all epochs), the one `total_steps` counts.
  void update(int64_t epoch, int64_t step, double loss, double samples_per_s);

  // Prints `text` and a newline, above the bar on a terminal (the bar is cleared first and
  // redrawn after), as is everywhere else.
  void line(const std::string& text);

  // Draws the last state and ends the bar's line, so later output starts on a fresh line.
  // Prints nothing when not interactive; calling it again does nothing.
  void finish();

  bool interactive() const { return interactive_; }

  // The bar's text for a state, without '\r': for tests and for callers that log it.
  std::string render(int64_t epoch, int64_t step, double loss, double samples_per_s,
                     double eta_seconds) const;

 private:
  void draw();
  double eta_seconds() const;

  int64_t total_;
  std::FILE* out_;
  bool interactive_;
  bool shown_ = false;    // a bar is on screen (the cursor is at its end)
  bool pending_ = false;  // an update has not been drawn yet (rate limit)
  int64_t epoch_ = 0, step_ = 0;
  double loss_ = 0, samples_per_s_ = 0;
  // The rate behind the ETA is measured from the first update, so a slow first step (JIT
  // compiling) weighs on the estimate only until later steps dilute it.
  bool started_ = false;
  int64_t first_step_ = 0;
  double first_time_ = 0, last_draw_ = 0;  // seconds on the steady clock (progress.cpp)
};

}  // namespace towerjit::report
