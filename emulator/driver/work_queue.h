// Streams and events of the emulated GPU, with CUDA's semantics: each stream runs its work in
// order on a host thread of its own, concurrently with every other stream; an event records a
// point in a stream's work, and a stream told to wait on it runs nothing queued after the wait
// until that point has run. Work that faults makes its device's error sticky, as a GPU's
// context is after a fault.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>

namespace towerjit::emulator {

// The first fault of a device's work: reported by every later synchronising call.
class StickyError {
 public:
  void set(int code, const std::string& message);
  void clear();
  int code() const;
  std::string message() const;

 private:
  mutable std::mutex mutex_;
  int code_ = 0;
  std::string message_;
};

class Stream {
 public:
  // `random_delays`: a seed for TOWERJIT_EMULATOR_SCHEDULE=random (a random 0-2 ms before each
  // piece of work), or none.
  Stream(StickyError& errors, std::optional<unsigned long long> random_delays);
  ~Stream();  // finishes the queued work first
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Queues `work`; it runs after everything queued before it. A work item that throws
  // emulator::Fault sets the sticky error; later items still run (their results are moot).
  void enqueue(std::function<void()> work);
  // Waits until everything queued so far has run.
  void synchronize();
  // Whether everything queued so far has run.
  bool idle();

 private:
  void run();

  StickyError& errors_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t queued_ = 0, finished_ = 0;
  bool stopping_ = false;
  std::optional<std::mt19937_64> delays_;
  std::thread worker_;
};

class Event {
 public:
  // Marks, on `stream`, the point after everything queued there so far.
  void record(Stream& stream);
  // Makes `stream` wait, before its next work, for the point last recorded.
  void wait_on(Stream& stream);
  // Whether the point last recorded has been reached (true if never recorded, as CUDA).
  bool reached();
  void synchronize();
  // Milliseconds between the points two events reached.
  static float elapsed_ms(Event& start, Event& end);

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::uint64_t recorded_ = 0, reached_ = 0;
  std::chrono::steady_clock::time_point when_{};
};

}  // namespace towerjit::emulator
