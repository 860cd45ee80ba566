#include "runtime/data/batch_pipeline.h"

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "dsl/error.h"
#include "dsl/philox.h"

namespace towerjit::data {
namespace {

// The shuffle's Philox stream is tagged ("SHUF") so that a run using one seed for the initial
// weights and for the shuffle does not draw the same numbers for both.
constexpr uint64_t kShuffleStream = 0x5348'5546ull << 32;

// Uniform 64-bit numbers from Philox blocks keyed by (seed, stream), two per block.
class Draws {
 public:
  Draws(uint64_t seed, uint64_t stream)
      : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}, stream_(stream) {}
  uint64_t next() {
    if (used_ == 2) {
      block_ = philox4x32_10({static_cast<uint32_t>(counter_), static_cast<uint32_t>(counter_ >> 32),
                              static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32)},
                             key_);
      ++counter_, used_ = 0;
    }
    const int w = 2 * used_++;
    return static_cast<uint64_t>(block_[w]) << 32 | block_[w + 1];
  }
  // Uniform in [0, bound) without bias (Lemire's multiply-and-reject): the shuffle then
  // depends on nothing implementation-defined, unlike std::uniform_int_distribution.
  uint64_t below(uint64_t bound) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
    if (static_cast<uint64_t>(m) < bound) {
      const uint64_t threshold = -bound % bound;
      while (static_cast<uint64_t>(m) < threshold) m = static_cast<unsigned __int128>(next()) * bound;
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  PhiloxKey key_;
  uint64_t stream_;
  uint64_t counter_ = 0;
  PhiloxCounter block_{};
  int used_ = 2;
};

}  // namespace

std::vector<int64_t> epoch_order(int64_t size, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(size, 0)));
  std::iota(order.begin(), order.end(), 0);
  if (!shuffle) return order;
  Draws draws(seed, kShuffleStream + static_cast<uint64_t>(epoch));
  for (int64_t i = size - 1; i > 0; --i)
    std::swap(order[i], order[draws.below(static_cast<uint64_t>(i) + 1)]);
  return order;
}

int64_t batches_per_epoch(int64_t size, const PipelineOptions& o) {
  if (o.batch < 1) return 0;
  const int64_t rest = size % o.batch;
  const bool keep_rest = rest > 0 && !o.drop_last && rest >= o.min_batch;
  return size / o.batch + (keep_rest ? 1 : 0);
}

// Batches are numbered by one sequence over all epochs: epoch * batches_per_epoch + index.
struct BatchPipeline::Workers {
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  mutable std::mutex mutex;
  std::condition_variable space;  // workers wait for room: claimed < next + depth
  std::condition_variable ready;  // the consumer waits for slots[next]
  int64_t next = 0;               // the batch next() returns
  int64_t claimed = 0;            // the batch the next free worker prepares
  std::map<int64_t, Slot> slots;  // prepared, not yet taken
  std::exception_ptr error;       // the failure next() rethrows for ever once reached
  bool failed = false;            // a worker failed: prepare nothing more
  bool stop = false;

  std::mutex orders_mutex;  // the shuffles of the epochs in flight, computed once each
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders;

  std::vector<std::thread> threads;  // last: started once everything above exists

  std::shared_ptr<const std::vector<int64_t>> order_for(int64_t epoch, int64_t consumer_epoch, int64_t size,
                                                        const PipelineOptions& options);
};

BatchPipeline::BatchPipeline(const Dataset& data, PipelineOptions options, PipelinePosition start, Loc loc)
    : BatchPipeline(view_of(data, loc), std::move(options), start, loc) {}

BatchPipeline::BatchPipeline(const TensorDataset& data, PipelineOptions options, PipelinePosition start, Loc loc)
    : BatchPipeline(view_of(data), std::move(options), start, loc) {}

BatchPipeline::BatchPipeline(DatasetView data, PipelineOptions options, PipelinePosition start, Loc loc)
    : data_(std::move(data)), options_(std::move(options)),
      batches_per_epoch_(data::batches_per_epoch(data_.size(), options_)),
      w_(std::make_unique<Workers>()) {
  const PipelineOptions& o = options_;
  user_check(o.batch >= 1, loc) << "batch size " << o.batch << " is not positive; use a batch of at least 1";
  user_check(data_.size() > 0, loc) << "the dataset is empty: there is nothing to make batches of; check the data "
                                       "directory and split";
  user_check(o.batch <= data_.size(), loc)
      << "batch size " << o.batch << " is larger than the dataset (" << count_of(data_.size(), "example")
      << "); use a batch of at most " << data_.size();
  user_check(o.min_batch >= 1 && o.min_batch <= o.batch, loc)
      << "min_batch " << o.min_batch << " must be between 1 and the batch size (" << o.batch
      << "); it drops a last partial batch smaller than it, e.g. one too small to split over the towers";
  user_check(o.threads >= 1 && o.depth >= 1, loc)
      << "the pipeline needs at least 1 thread and a depth of at least 1 (got threads " << o.threads << ", depth "
      << o.depth << ")";
  user_check(start.epoch >= 0 && start.batch >= 0 && start.batch < batches_per_epoch_, loc)
      << "cannot start at epoch " << start.epoch << ", batch " << start.batch << ": an epoch here has "
      << count_of(batches_per_epoch_, "batch", "batches") << " (" << count_of(data_.size(), "example") << ", batch " << o.batch
      << "); was the position saved with another batch size, dataset or drop_last?";
  w_->next = w_->claimed = start.epoch * batches_per_epoch_ + start.batch;
  try {
    for (int t = 0; t < o.threads; ++t) w_->threads.emplace_back([this] { work(); });
  } catch (...) {  // no destructor runs for a half-built object: join what started
    stop();
    throw;
  }
}

void BatchPipeline::stop() {
  {
    std::lock_guard lock(w_->mutex);
    w_->stop = true;
  }
  w_->space.notify_all();
  for (auto& t : w_->threads) t.join();
}

BatchPipeline::~BatchPipeline() { stop(); }

PipelinePosition BatchPipeline::position() const {
  std::lock_guard lock(w_->mutex);
  return {w_->next / batches_per_epoch_, w_->next % batches_per_epoch_};
}

Batch BatchPipeline::next() {
  std::unique_lock lock(w_->mutex);
  if (w_->error) std::rethrow_exception(w_->error);
  w_->ready.wait(lock, [&] { return w_->slots.count(w_->next) > 0; });
  Workers::Slot slot = std::move(w_->slots.extract(w_->next).mapped());
  if (slot.error) {
    // The position stays here: a checkpoint taken now resumes at the batch that failed.
    w_->error = slot.error;
    std::rethrow_exception(w_->error);
  }
  ++w_->next;
  lock.unlock();
  w_->space.notify_one();  // one batch taken: room for one more
  return std::move(slot.batch);
}

void BatchPipeline::work() {
  for (;;) {
    int64_t sequence, consumer_epoch;
    {
      std::unique_lock lock(w_->mutex);
      w_->space.wait(lock, [&] { return w_->stop || w_->failed || w_->claimed < w_->next + options_.depth; });
      if (w_->stop || w_->failed) return;
      sequence = w_->claimed++;
      consumer_epoch = w_->next / batches_per_epoch_;
    }
    Workers::Slot slot;
    try {
      slot.batch = make(sequence, consumer_epoch);
    } catch (...) {
      slot.error = std::current_exception();
    }
    const bool failed = slot.error != nullptr;
    {
      std::lock_guard lock(w_->mutex);
      w_->failed = w_->failed || failed;
      w_->slots.emplace(sequence, std::move(slot));
    }
    w_->ready.notify_all();
    if (failed) w_->space.notify_all();  // idle workers: nothing more to prepare
  }
}

Batch BatchPipeline::make(int64_t sequence, int64_t consumer_epoch) {
  Batch b;
  b.epoch = sequence / batches_per_epoch_;
  b.index = sequence % batches_per_epoch_;
  b.batches_in_epoch = batches_per_epoch_;
  const auto order = w_->order_for(b.epoch, consumer_epoch, data_.size(), options_);
  const int64_t begin = b.index * options_.batch;
  const int64_t end = std::min(begin + options_.batch, data_.size());
  std::vector<int64_t> rows(order->begin() + begin, order->begin() + end);
  if (options_.part) {  // this process's rows of the batch only
    b.whole = end - begin;
    const auto [first, count] = options_.part(b.whole);
    rows = std::vector<int64_t>(rows.begin() + first, rows.begin() + first + count);
  }
  b.feeds = gather_rows(data_, rows);
  if (options_.transform) options_.transform(b);
  return b;
}

std::shared_ptr<const std::vector<int64_t>> BatchPipeline::Workers::order_for(int64_t epoch, int64_t consumer_epoch,
                                                                            int64_t size,
                                                                            const PipelineOptions& options) {
  // Computed under the lock: a worker that needs the same epoch waits for it rather than
  // shuffling it again. Epochs before the consumer's are done with (every batch not yet taken
  // is at or after it), so they are dropped; a worker still holding one keeps its copy alive.
  std::lock_guard lock(orders_mutex);
  orders.erase(orders.begin(), orders.lower_bound(consumer_epoch));
  auto& order = orders[epoch];
  if (!order) order = std::make_shared<const std::vector<int64_t>>(epoch_order(size, options.seed, epoch, options.shuffle));
  return order;
}

}  // namespace towerjit::data
