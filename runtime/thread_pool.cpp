#include "runtime/thread_pool.h"

#include "runtime/cpu_affinity.h"
#include "runtime/flush_denormals.h"

#include <algorithm>

namespace towerjit {

ThreadPool::ThreadPool(int threads, std::vector<std::vector<int>> pins) {
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
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
    pending_ = static_cast<int>(workers_.size());
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  std::exception_ptr mine;
  try {
    auto [b, e] = chunk(n, size(), 0);
    if (b < e) body(b, e);
  } catch (...) {
    mine = std::current_exception();
  }
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  body_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::work(int index, std::vector<int> pin) {
  const FlushDenormals flush;  // the pool's threads only ever compute for towerjit
  pin_current_thread(pin);
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
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
    if (--pending_ == 0) done_.notify_all();
  }
}

}  // namespace towerjit
