#include "runtime/towers/feed_prefetch.h"

#include <atomic>
#include <cstring>

#include "dsl/error.h"

namespace towerjit::detail {
namespace {

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

std::atomic<int64_t> copied{0};

}  // namespace

FeedPrefetcher::FeedPrefetcher(const std::vector<CudaProgram*>& towers) {
  towers_.resize(towers.size());
  for (size_t t = 0; t < towers.size(); ++t) {
    Tower& tower = towers_[t];
    tower.program = towers[t];
    cuda::DeviceContext& device = tower.program->device();
    device.make_current();
    tower.copies = std::make_unique<cuda::Stream>(device);
    for (Slot& s : tower.slots) {
      s.host = std::make_unique<cuda::PinnedBuffer>(device.context());
      // Events for ordering only: without timing they cost less to record and wait on.
      s.uploaded = std::make_unique<cuda::Event>(device, /*timing=*/false);
      s.consumed = std::make_unique<cuda::Event>(device, /*timing=*/false);
    }
  }
  thread_ = std::thread([this] { work(); });
}

FeedPrefetcher::~FeedPrefetcher() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
  // The copies out of the page-locked blocks and into the buffers land before either is freed.
  for (Tower& tower : towers_) {
    try {
      tower.program->device().make_current();
      tower.copies->synchronize();
    } catch (...) {  // a device already failed: the error was raised where it happened
    }
  }
}

void FeedPrefetcher::prefetch(const HostFeeds& batch, std::vector<Rows> rows) {
  internal_check(rows.size() == towers_.size());
  {
    std::lock_guard lock(mutex_);
    internal_check(static_cast<int>(jobs_.size()) + (in_use_ >= 0 ? 1 : 0) < 2)
        << "FeedPrefetcher: a third batch prefetched before the first was released";
    jobs_.push_back({.batch = &batch, .rows = std::move(rows), .slot = next_slot_});
    next_slot_ ^= 1;
  }
  changed_.notify_all();
}

FeedPrefetcher::Ready FeedPrefetcher::take() {
  std::unique_lock lock(mutex_);
  internal_check(!jobs_.empty() && in_use_ < 0) << "FeedPrefetcher: take() with no batch prefetched, or one in use";
  changed_.wait(lock, [&] { return jobs_.front().done; });
  Job job = std::move(jobs_.front());
  jobs_.pop_front();
  if (job.error) std::rethrow_exception(job.error);  // the slot was not handed out: free again
  in_use_ = job.slot;
  Ready ready;
  for (Tower& tower : towers_) {
    ready.feeds.push_back(&tower.slots[job.slot].device);
    ready.uploaded.push_back(tower.slots[job.slot].uploaded.get());
  }
  return ready;
}

void FeedPrefetcher::release() {
  std::lock_guard lock(mutex_);
  internal_check(in_use_ >= 0) << "FeedPrefetcher: release() with no batch taken";
  release_locked();
}

void FeedPrefetcher::drop() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] {
    for (const Job& j : jobs_)
      if (!j.done) return false;
    return true;
  });
  // The slots alternate: with the jobs gone, the next batch goes where the oldest would have.
  if (!jobs_.empty()) next_slot_ = jobs_.front().slot;
  jobs_.clear();
  if (in_use_ >= 0) release_locked();
}

void FeedPrefetcher::release_locked() {
  for (Tower& tower : towers_) {
    Slot& slot = tower.slots[in_use_];
    tower.program->device().make_current();
    slot.consumed->record(tower.program->stream());
  }
  in_use_ = -1;
}

void FeedPrefetcher::work() {
  while (true) {
    Job* job = nullptr;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] {
        if (stopping_) return true;
        for (Job& j : jobs_)
          if (!j.done) return true;
        return false;
      });
      if (stopping_) return;
      for (Job& j : jobs_)
        if (!j.done) {
          job = &j;  // deque elements stay where they are while others are added at the back
          break;
        }
    }
    // The slot's previous batch was released before this job was queued (prefetch's check),
    // so nothing else touches the slot while it is copied.
    try {
      copy(*job);
    } catch (...) {
      job->error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      job->done = true;
    }
    changed_.notify_all();
  }
}

void FeedPrefetcher::copy(Job& job) {
  for (size_t t = 0; t < towers_.size(); ++t) copy_to(towers_[t], towers_[t].slots[job.slot], *job.batch, job.rows[t]);
  copied.fetch_add(1);
}

void FeedPrefetcher::copy_to(Tower& tower, Slot& slot, const HostFeeds& batch, Rows rows) {
  cuda::DeviceContext& device = tower.program->device();
  device.make_current();
  // The page-locked block is written again only once the copies out of it have run.
  slot.uploaded->synchronize();
  struct Piece {
    const char* from;
    size_t bytes;
    DeviceTensor* to;
  };
  std::vector<Piece> pieces;
  size_t total = 0;
  for (const kir::Buffer& b : tower.program->program().buffers) {
    if (b.kind != kir::Buffer::Kind::input) continue;
    const auto it = batch.find(b.name);
    if (it == batch.end()) continue;  // the run names the input missing
    const HostTensor& h = it->second;
    const size_t row = h.shape[0] > 0 ? static_cast<size_t>(h.bytes() / h.shape[0]) : 0;
    Shape shape = h.shape;
    shape[0] = rows.second;
    DeviceTensor& d = slot.device[b.name];
    const size_t bytes = row * static_cast<size_t>(rows.second);
    if (!d.buffer || d.buffer.bytes() < bytes) {
      // A new buffer frees the old one for others: the run that read it must have finished.
      slot.consumed->synchronize();
      d.buffer = device.allocate(std::max<size_t>(bytes, 1));
    }
    d.shape = shape, d.dtype = h.dtype, d.device = &device;
    pieces.push_back({static_cast<const char*>(h.data()) + rows.first * row, bytes, &d});
    total += align64(bytes);
  }
  char* block = slot.host->reserve(std::max<size_t>(total, 64));
  const cuda::DriverApi& api = cuda::require_driver();
  // The buffers are written on the device only after the run that read them (the slot's
  // previous batch) has.
  tower.copies->wait(*slot.consumed);
  size_t at = 0;
  for (const Piece& p : pieces) {
    std::memcpy(block + at, p.from, p.bytes);
    if (p.bytes > 0)
      cuda::check_cuda(api.MemcpyHtoDAsync(p.to->ptr(), block + at, p.bytes, tower.copies->handle()),
                       "cuMemcpyHtoDAsync", " (a batch prefetched to " + device.str() + ")");
    at += align64(p.bytes);
  }
  slot.uploaded->record(*tower.copies);
}

int64_t FeedPrefetcher::batches_copied() { return copied.load(); }

}  // namespace towerjit::detail
