// Streams and events of the emulated GPU, with CUDA's semantics: each stream runs its work in
// order on a host thread of its own, concurrently with every other stream; an event records a
// point in a stream's work, and a stream told to wait on it runs nothing queued after the wait
// until that point has run. Work that faults makes its device's error sticky, as a GPU's
// context is after a fault.
//
// Stream capture (cuStreamBeginCapture): while a stream captures, work queued on it is recorded
// into its Capture rather than run; a stream that waits on an event recorded in the capture
// joins it, and its work is recorded too. The recorded work, in the order it was queued, is the
// graph; a launch queues it on the launching stream (an order that respects every stream's own
// order and every event wait of the capture, since a wait is queued after its record).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

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

// One capture sequence: the work recorded so far, the stream that began it (the one that must
// end it), the thread that began it (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: that thread may not
// make unsafe calls such as cuMemAlloc while it lasts), and whether a prohibited call broke it.
struct Capture {
  std::mutex mutex;  // streams joined to the capture record from their threads
  // Each piece of work as a maker, called when the graph is launched (most return the work
  // recorded; an NCCL call takes its collective's sequence number then, in launch order).
  std::vector<std::function<std::function<void()>()>> work;
  void* origin = nullptr;  // the Stream
  std::thread::id thread;
  int mode = 0;
  int invalidated_by = 0;  // the CUresult of the call that broke it, 0 while intact
  std::string broken_by;   // that call's name
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
  // Queues make(), called now; under capture, records `make` itself, called at each launch of
  // the graph, in the order the host launches it (for work whose identity is fixed when it is
  // queued, as a collective's place in its communicator's order).
  void enqueue_made(std::function<std::function<void()>()> make);
  // Waits until everything queued so far has run.
  void synchronize();
  // Whether everything queued so far has run.
  bool idle();
  // Under TOWERJIT_EMULATOR_SCHEDULE=random, a seed for the order of a kernel's blocks, drawn
  // anew for each launch; else 0 (grid order).
  std::uint64_t block_order_seed();
  // The capture this stream records into (began on it, or joined through an event), or null.
  std::shared_ptr<Capture> capture();
  void set_capture(std::shared_ptr<Capture> c);

 private:
  void run();

  StickyError& errors_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t queued_ = 0, finished_ = 0;
  bool stopping_ = false;
  std::optional<std::mt19937_64> delays_;
  std::optional<unsigned long long> schedule_seed_;
  std::atomic<std::uint64_t> launches_{0};  // block_order_seed's calls
  std::shared_ptr<Capture> capture_;
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
  // The capture the event was last recorded in (cuEventRecord on a capturing stream), or null:
  // such an event marks a point of the graph, not of any stream's work.
  std::shared_ptr<Capture> captured_in;
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
