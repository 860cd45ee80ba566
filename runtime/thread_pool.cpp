#include "runtime/thread_pool.h"

#include "runtime/cpu_affinity.h"
#include "runtime/flush_denormals.h"

#include <algorithm>
#include <chrono>

namespace towerjit {
namespace {

// How long a thread of the pool spins, waiting for the next loop (a worker) or for the workers
// to finish (the caller), before it sleeps on a condition variable. A step's loops come a few
// microseconds apart; sleeping between them costs a futex wake each time, and woken that often
// a worker was put on its waker's core by the scheduler, so the two halves of every loop ran one
// after the other: a loop of two 12 us halves took 75 us back to back and 25 us with a pause
// between calls, 12 us with the spin (a 2-vCPU KVM guest, docs/performance.md); a sleeping
// worker there took about 100 us to wake, so loops 200 us apart still paid it with a spin of
// 200 us, and not with one of 1 ms (OpenMP's runtimes spin longer still: GOMP_SPINCOUNT,
// KMP_BLOCKTIME). A spinning worker takes a core from whatever else would run, so a pool with
// more threads than the process has cores never spins, and matrix products no longer hand the
// cores to OpenBLAS's own threads (runtime/cpu/gemm.h).
constexpr auto kSpin = std::chrono::microseconds(1000);

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until `ready()` or kSpin has passed; returns whether it became ready.
template <class Ready>
bool spin_until(Ready ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  if (ready()) return true;
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      if (ready()) return true;
      relax();
    }
    if (std::chrono::steady_clock::now() >= until) return ready();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads, std::vector<std::vector<int>> pins) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  spins_ = threads <= static_cast<int>(allowed_cores().size());
  pins.resize(threads);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i, pin = std::move(pins[i])] { work(i, pin); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {
// Chunk `index` of `parts` over [0, n): sizes differ by at most one.
std::pair<int64_t, int64_t> chunk(int64_t n, int parts, int index) {
  return {n * index / parts, n * (index + 1) / parts};
}
}  // namespace

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    body(0, n);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    n_ = n;
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    error_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  std::exception_ptr mine;
  try {
    auto [b, e] = chunk(n, size(), 0);
    if (b < e) body(b, e);
  } catch (...) {
    mine = std::current_exception();
  }
  const auto finished = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (spins_) spin_until(finished);
  std::unique_lock lock(mutex_);
  done_.wait(lock, finished);
  body_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::work(int index, std::vector<int> pin) {
  const FlushDenormals flush;  // the pool's threads only ever compute for towerjit
  pin_current_thread(pin);
  uint64_t seen = 0;
  const auto called = [&] {
    return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
  };
  for (;;) {
    if (spins_) spin_until(called);
    // body_ and n_ are read under the mutex they were written under.
    std::unique_lock lock(mutex_);
    wake_.wait(lock, called);
    if (stop_) return;
    seen = generation_.load(std::memory_order_relaxed);
    const auto* body = body_;
    const int64_t n = n_;
    lock.unlock();
    std::exception_ptr failure;
    try {
      auto [b, e] = chunk(n, size(), index);
      if (b < e) (*body)(b, e);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    if (failure && !error_) error_ = failure;
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.notify_all();
  }
}

}  // namespace towerjit
