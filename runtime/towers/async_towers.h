// Free-running async towers: one thread per tower, each working through a queue of its own
// (its slices of the batches, or its own batches), computing its gradients from the shared
// variables as they are and applying them by itself, with no barrier between towers — the
// seed's asynchronous trainer. fit() and TowerTrainer::run_async() feed it.
//
// With AsyncApply::max_staleness = k, a tower that has finished more than k pieces of work
// more than the slowest tower waits for it before it starts the next (k = 0: lock-step).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/towers/tower_state.h"

namespace towerjit::detail {

// An async tower's step: its gradients on its feeds from the shared variables as they are
// then, and its own apply (gradients times its scale) under the apply lock.
struct OwnApply {
  double loss = 0;
  double learning_rate = 0;
  int64_t staleness = 0;   // applies by other towers between its read and its apply
  int64_t applied_at = 0;  // the apply count before this apply
};
using ComputeAndApply = std::function<OwnApply(int tower, const HostFeeds& feeds, double scale)>;

class AsyncTowers {
 public:
  // A finished piece of work: which tower, the caller's tag, the loss of its slice, the
  // learning rate its apply used and the applies by other towers between its read and its apply.
  struct Done {
    int tower = 0;
    int64_t tag = 0;
    double loss = 0;
    double learning_rate = 0;
    int64_t staleness = 0;
  };

  // Starts one thread per tower of `state`, whose strategy must be async (checked by the
  // callers, which know the user's line); each runs `step` on its pieces of work.
  AsyncTowers(TowerState& state, ComputeAndApply step);
  // Drops the work not yet started, waits for the work under way, joins the threads.
  ~AsyncTowers();
  AsyncTowers(const AsyncTowers&) = delete;
  AsyncTowers& operator=(const AsyncTowers&) = delete;

  // Queues `feeds` for tower `tower`; returns at once.
  void submit(int tower, HostFeeds feeds, int64_t tag);
  // The next piece of work to finish, in the order they finish; blocks until one does. A tower's
  // error is raised here (and stops every tower).
  Done next_done();
  // Pieces submitted and not yet returned by next_done().
  int64_t outstanding() const;
  // How many steps (batches) a feeder keeps queued ahead of the slowest tower: enough that
  // the staleness bound, not the queue, limits how far a tower runs ahead (8 when unbounded,
  // which bounds the memory the queued slices take).
  static int64_t window(const Reduction& reduction);
  // Applies, the largest lead over the slowest tower and the staleness seen so far.
  TowerTrainer::AsyncReport report() const;  // (under the lock)

 private:
  void run(int tower);
  int64_t slowest() const;  // under mutex_

  TowerState& state_;
  const ComputeAndApply step_;
  const std::optional<int64_t> bound_;
  const std::vector<double> scales_;  // each tower's gradient scale (1/N or 1)
  mutable std::mutex mutex_;
  std::condition_variable work_, finished_;
  std::vector<std::deque<std::pair<int64_t, HostFeeds>>> queues_;
  std::vector<int64_t> completed_;  // per tower
  std::deque<Done> done_;
  int64_t outstanding_ = 0;
  bool stopping_ = false;
  std::exception_ptr failure_;
  StalenessLog log_;
  std::vector<std::thread> threads_;  // last: started once everything above exists
};

}  // namespace towerjit::detail
