#include "emulator/driver/work_queue.h"

#include <cstdio>

#include "emulator/kernel/block_scheduler.h"

namespace towerjit::emulator {

void StickyError::set(int code, const std::string& message) {
  std::lock_guard lock(mutex_);
  if (code_ != 0) return;  // the first fault is the one to report
  code_ = code;
  message_ = message;
  std::fprintf(stderr, "towerjit: %s\n", message.c_str());
}

void StickyError::clear() {
  std::lock_guard lock(mutex_);
  code_ = 0;
  message_.clear();
}

int StickyError::code() const {
  std::lock_guard lock(mutex_);
  return code_;
}

std::string StickyError::message() const {
  std::lock_guard lock(mutex_);
  return message_;
}

std::uint64_t Stream::block_order_seed() {
  if (!schedule_seed_) return 0;
  // splitmix64 of the schedule's seed and the launch's number: any thread may call it (a graph's
  // work runs on the stream that launches it).
  std::uint64_t z = *schedule_seed_ + 0x9e3779b97f4a7c15ull * (1 + launches_.fetch_add(1));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) | 1;
}

Stream::Stream(StickyError& errors, std::optional<unsigned long long> random_delays)
    : errors_(errors), schedule_seed_(random_delays) {
  if (random_delays) delays_.emplace(*random_delays);
  worker_ = std::thread([this] { run(); });
}

Stream::~Stream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

void Stream::enqueue(std::function<void()> work) {
  {
    std::lock_guard lock(mutex_);
    if (capture_) {  // recorded, not run: a launch of the graph queues it
      std::lock_guard recording(capture_->mutex);
      capture_->work.push_back([w = std::move(work)] { return w; });
      return;
    }
    queue_.push_back(std::move(work));
    ++queued_;
  }
  changed_.notify_all();
}

void Stream::synchronize() {
  std::unique_lock lock(mutex_);
  const std::uint64_t target = queued_;
  changed_.wait(lock, [&] { return finished_ >= target; });
}

bool Stream::idle() {
  std::lock_guard lock(mutex_);
  return finished_ == queued_;
}

void Stream::enqueue_made(std::function<std::function<void()>()> make) {
  {
    std::lock_guard lock(mutex_);
    if (capture_) {
      std::lock_guard recording(capture_->mutex);
      capture_->work.push_back(std::move(make));
      return;
    }
  }
  enqueue(make());
}

std::shared_ptr<Capture> Stream::capture() {
  std::lock_guard lock(mutex_);
  return capture_;
}

void Stream::set_capture(std::shared_ptr<Capture> c) {
  std::lock_guard lock(mutex_);
  capture_ = std::move(c);
}

void Stream::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    if (delays_) std::this_thread::sleep_for(std::chrono::microseconds((*delays_)() % 2000));
    try {
      work();
    } catch (const Fault& f) {
      errors_.set(f.cuda_error(), f.what());
    } catch (const std::exception& e) {
      errors_.set(Fault::kLaunchFailed, std::string("emulated GPU: ") + e.what());
    }
    lock.lock();
    ++finished_;
    changed_.notify_all();
  }
}

void Event::record(Stream& stream) {
  std::uint64_t point;
  {
    std::lock_guard lock(mutex_);
    point = ++recorded_;
  }
  stream.enqueue([this, point] {
    {
      std::lock_guard lock(mutex_);
      if (point > reached_) reached_ = point, when_ = std::chrono::steady_clock::now();
    }
    changed_.notify_all();
  });
}

void Event::wait_on(Stream& stream) {
  std::uint64_t point;
  {
    std::lock_guard lock(mutex_);
    point = recorded_;  // the wait is for the record made before it, not later ones
  }
  stream.enqueue([this, point] {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return reached_ >= point; });
  });
}

bool Event::reached() {
  std::lock_guard lock(mutex_);
  return reached_ >= recorded_;
}

void Event::synchronize() {
  std::unique_lock lock(mutex_);
  const std::uint64_t point = recorded_;
  changed_.wait(lock, [&] { return reached_ >= point; });
}

float Event::elapsed_ms(Event& start, Event& end) {
  std::scoped_lock lock(start.mutex_, end.mutex_);
  return std::chrono::duration<float, std::milli>(end.when_ - start.when_).count();
}

}  // namespace towerjit::emulator
