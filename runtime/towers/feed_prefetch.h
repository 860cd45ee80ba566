// The next batch on its way to the GPU towers while the current one trains (issue 21, item 4;
// the twin of a DataLoader's pinned memory with copies on a side stream). fit() on sync towers
// that are all GPUs hands each batch here a step ahead. A thread of the prefetcher's own copies
// every tower's rows of it into page-locked memory of that tower's, then queues them on a copy
// stream of the tower's GPU into device buffers and records an event behind them; the tower's
// run waits on that event, not the host. The training thread copies nothing: the step before
// runs on the GPU while the rows are gathered and uploaded.
//
// Two slots per tower, used in turn: batch k + 1 is copied into one while batch k trains from
// the other. A slot is written again only when the copies out of its page-locked block have
// run (the thread waits for its upload event) and, on the device, when the run that read its
// buffers has (the copy stream waits for an event recorded behind that run). Its buffers keep
// their addresses from batch to batch (grown only for a larger one), so the towers' programs
// replay their CUDA graphs: one per slot.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/cuda/cuda_program.h"
#include "runtime/cuda/device_tensor.h"

namespace towerjit::detail {

class FeedPrefetcher {
 public:
  // Rows [first, first + count) of a batch.
  using Rows = std::pair<int64_t, int64_t>;

  // For each tower's program: what it feeds on (its inputs) and where (its device and stream).
  explicit FeedPrefetcher(const std::vector<CudaProgram*>& towers);
  // Stops the thread (a copy under way finishes) and waits for the copies it queued.
  ~FeedPrefetcher();
  FeedPrefetcher(const FeedPrefetcher&) = delete;
  FeedPrefetcher& operator=(const FeedPrefetcher&) = delete;

  // Starts copying `batch` to the towers, tower t its rows `rows[t]` of every input its
  // program has (inputs the batch lacks are left out: the run then names them). `batch` must
  // stay alive and unchanged until the take() that returns it. At most two batches may be
  // prefetched and not yet released.
  void prefetch(const HostFeeds& batch, std::vector<Rows> rows);

  struct Ready {
    std::vector<const DeviceFeeds*> feeds;     // per tower, on its GPU
    std::vector<const cuda::Event*> uploaded;  // per tower: its run waits for this first
  };
  // The oldest batch prefetched, once its copies are queued (they run on); rethrows what copying
  // it raised. Call release() once the towers' runs on it are queued.
  Ready take();
  // The towers' runs on the batch take() gave are queued: its slots are written again only once
  // those runs have read them.
  void release();
  // Forgets every batch prefetched and not taken, once the thread is done copying it (the
  // caller may then free it), and releases a batch taken and not released (a step that
  // failed). What copying them raised is dropped with them.
  void drop();

  // Batches copied so far by every prefetcher of the process (tests, the bench).
  static int64_t batches_copied();

 private:
  struct Slot {  // one tower's share of one batch
    std::unique_ptr<cuda::PinnedBuffer> host;
    DeviceFeeds device;
    // Never recorded, an event is complete: waiting for it costs nothing (CUDA's rule).
    std::unique_ptr<cuda::Event> uploaded, consumed;
  };
  struct Tower {
    CudaProgram* program;
    std::unique_ptr<cuda::Stream> copies;
    Slot slots[2];
  };
  struct Job {
    const HostFeeds* batch;
    std::vector<Rows> rows;
    int slot;
    bool done = false;
    std::exception_ptr error;
  };
  void release_locked();
  void work();
  void copy(Job& job);
  void copy_to(Tower& tower, Slot& slot, const HostFeeds& batch, Rows rows);

  std::vector<Tower> towers_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> jobs_;  // prefetched and not yet taken, oldest first
  int next_slot_ = 0;
  int in_use_ = -1;       // the slot of the batch taken and not released, or -1
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace towerjit::detail
