// Stopping a training run cleanly on SIGINT (Ctrl-C) or SIGTERM (a scheduler's stop, `kill`):
// fit() finishes the step in progress, lets its hooks end (a final checkpoint, the metrics),
// and then throws Interrupted, which a program maps to the usual exit code 128 + signal
// (130, 143). A second signal ends the process at once, as if nothing were installed.
#pragma once

#include <cstdint>
#include <string>

#include "dsl/exception.h"

namespace towerjit {

// What fit() throws once a run stopped on a signal has wound down. It is an Error, so a program
// that only catches Error still prints the message and fails; catch it first to exit with
// exit_code() and tell the user how to resume.
class Interrupted : public Error {
 public:
  Interrupted(const std::string& message, int signal, int64_t step)
      : Error(message), signal_(signal), step_(step) {}
  int signal() const { return signal_; }  // SIGINT or SIGTERM
  int64_t step() const { return step_; }  // the last step trained
  int exit_code() const override { return 128 + signal_; }

 private:
  int signal_;
  int64_t step_;
};

// "SIGINT", "SIGTERM", else "signal <n>".
std::string signal_name(int signal);

// While it lives, SIGINT and SIGTERM only record that they came (the handler sets an atomic
// flag and writes one line to stderr, nothing else) and put back the default action, so a
// second one ends the process at once. A signal the process ignores (SIG_IGN: a background job
// of a shell, nohup) stays ignored. The previous handlers come back on destruction. With
// `enabled` false it installs nothing and never reports a signal. One watch at a time per
// process: a nested one (fit inside a hook of fit) defers to the outer.
class InterruptWatch {
 public:
  explicit InterruptWatch(bool enabled = true);
  ~InterruptWatch();
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;

  // The first signal received while watching, or 0.
  int received() const;

 private:
  bool owner_ = false;
};

}  // namespace towerjit
