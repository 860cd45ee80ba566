#include "runtime/towers/async_towers.h"

#include <algorithm>
#include <variant>

#include "runtime/cpu_affinity.h"

namespace towerjit::detail {
namespace {

std::vector<double> async_scales(const Towers& towers) {
  // The scale of an async apply does not depend on slice sizes (1/N or 1).
  return reduction_weights(std::vector<int64_t>(towers.size(), 1), towers.reduction());
}

}  // namespace

AsyncTowers::AsyncTowers(TowerState& state, ComputeAndApply step)
    : state_(state),
      step_(std::move(step)),
      bound_(std::get<AsyncApply>(state.towers.reduction()).max_staleness),
      scales_(async_scales(state.towers)),
      queues_(state.towers.size()),
      completed_(state.towers.size(), 0) {
  for (int t = 0; t < state.towers.size(); ++t) threads_.emplace_back(&AsyncTowers::run, this, t);
}

AsyncTowers::~AsyncTowers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  for (std::thread& t : threads_) t.join();
  state_.count_lead(log_.report.max_lead);
}

int64_t AsyncTowers::window(const Reduction& reduction) {
  const auto bound = std::get<AsyncApply>(reduction).max_staleness;
  return std::max<int64_t>(8, bound ? *bound + 2 : 0);
}

void AsyncTowers::submit(int tower, HostFeeds feeds, int64_t tag) {
  {
    std::lock_guard lock(mutex_);
    queues_[tower].emplace_back(tag, std::move(feeds));
    ++outstanding_;
  }
  work_.notify_all();
}

AsyncTowers::Done AsyncTowers::next_done() {
  std::unique_lock lock(mutex_);
  finished_.wait(lock, [&] { return !done_.empty() || failure_; });
  if (failure_) std::rethrow_exception(failure_);
  Done d = done_.front();
  done_.pop_front();
  --outstanding_;
  return d;
}

int64_t AsyncTowers::outstanding() const {
  std::lock_guard lock(mutex_);
  return outstanding_;
}

TowerTrainer::AsyncReport AsyncTowers::report() const {
  std::lock_guard lock(mutex_);
  return log_.summary();
}

int64_t AsyncTowers::slowest() const { return *std::min_element(completed_.begin(), completed_.end()); }

void AsyncTowers::run(int tower) {
  if (state_.pinned) pin_current_thread(state_.tower_cores[tower]);
  std::unique_lock lock(mutex_);
  while (true) {
    // Work to do, and (with a bound k) no more than k pieces ahead of the slowest tower.
    work_.wait(lock, [&] {
      return stopping_ || failure_ ||
             (!queues_[tower].empty() && (!bound_ || completed_[tower] - slowest() <= *bound_));
    });
    if (stopping_ || failure_) return;
    auto [tag, feeds] = std::move(queues_[tower].front());
    queues_[tower].pop_front();
    lock.unlock();
    Done done{.tower = tower, .tag = tag};
    try {
      const OwnApply applied = step_(tower, feeds, scales_[tower]);
      done.loss = applied.loss;
      done.learning_rate = applied.learning_rate;
      done.staleness = applied.staleness;
    } catch (...) {
      lock.lock();
      if (!failure_) failure_ = std::current_exception();
      work_.notify_all();
      finished_.notify_all();
      return;
    }
    lock.lock();
    log_.report.max_lead = std::max(log_.report.max_lead, completed_[tower] - slowest());
    log_.add(done.staleness);
    ++completed_[tower];
    done_.push_back(done);
    work_.notify_all();  // a tower waiting on this one's lead may go on
    finished_.notify_all();
  }
}

}  // namespace towerjit::detail
