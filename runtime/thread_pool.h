// A fixed set of worker threads that split a loop's iterations between them. CPU towers and
// the CPU backend's outer loops run on it. Its workers compute with denormals flushed to zero
// (runtime/flush_denormals.h); the calling thread keeps its own mode.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace towerjit {

class ThreadPool {
 public:
  // `threads` workers including the caller; 0 means one per hardware thread. Worker i (1 ..
  // threads-1; 0 is the caller, whose thread the pool leaves alone) runs on the cores
  // `pins[i]` when given and not empty (runtime/cpu_affinity.h).
  explicit ThreadPool(int threads = 0, std::vector<std::vector<int>> pins = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls body(begin, end) on contiguous chunks covering [0, n), one chunk per thread (the
  // caller runs the first), and returns when all are done. The first exception thrown by a
  // chunk is rethrown here.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body);

 private:
  void work(int index, std::vector<int> pin);

  std::vector<std::thread> workers_;
  // A loop is published under the mutex (body_, n_, then generation_ counted up); a worker sees
  // it by spinning on generation_ for a while after its last chunk, else by sleeping on wake_.
  // The caller likewise spins on pending_ before it sleeps on done_.
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0;
  std::atomic<uint64_t> generation_ = 0;
  std::atomic<int> pending_ = 0;
  std::atomic<bool> stop_ = false;
  bool spins_ = true;  // false when the pool has more threads than the process has cores
  std::exception_ptr error_;
};

}  // namespace towerjit
