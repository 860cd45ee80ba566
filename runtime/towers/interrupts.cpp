#include "runtime/towers/interrupts.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace towerjit {
namespace {

constexpr int kSignals[2] = {SIGINT, SIGTERM};

// Lock-free, so the handler may touch it (a std::atomic<int> is on every target we build for).
std::atomic<int> received_signal{0};
std::atomic<bool> watching{false};
struct sigaction previous[2];
bool installed[2] = {false, false};
static_assert(std::atomic<int>::is_always_lock_free);

// Only async-signal-safe calls: sigaction, write.
extern "C" void on_signal(int signal) {
  int none = 0;
  received_signal.compare_exchange_strong(none, signal);
  struct sigaction fallback = {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  for (int i = 0; i < 2; ++i)
    if (installed[i]) ::sigaction(kSignals[i], &fallback, nullptr);
  static constexpr char kInt[] =
      "\ntowerjit: SIGINT received: stopping after this step (a final checkpoint is written if checkpoints are on);"
      " press Ctrl-C again to stop at once\n";
  static constexpr char kTerm[] =
      "\ntowerjit: SIGTERM received: stopping after this step (a final checkpoint is written if checkpoints are "
      "on); send it again to stop at once\n";
  const bool is_int = signal == SIGINT;
  [[maybe_unused]] const ssize_t n = ::write(2, is_int ? kInt : kTerm, (is_int ? sizeof kInt : sizeof kTerm) - 1);
}

}  // namespace

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

InterruptWatch::InterruptWatch(bool enabled) {
  if (!enabled || watching.exchange(true)) return;
  owner_ = true;
  received_signal.store(0);
  struct sigaction action = {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: reads and writes the signal lands in (the data, a checkpoint) carry on.
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < 2; ++i) {
    installed[i] = false;
    if (::sigaction(kSignals[i], nullptr, &previous[i]) != 0 || previous[i].sa_handler == SIG_IGN) continue;
    installed[i] = true;  // before the handler can run, so it resets this signal too
    if (::sigaction(kSignals[i], &action, nullptr) != 0) installed[i] = false;
  }
}

InterruptWatch::~InterruptWatch() {
  if (!owner_) return;
  for (int i = 0; i < 2; ++i)
    if (installed[i]) ::sigaction(kSignals[i], &previous[i], nullptr);
  for (bool& i : installed) i = false;
  watching.store(false);
}

int InterruptWatch::received() const { return owner_ ? received_signal.load() : 0; }

}  // namespace towerjit
