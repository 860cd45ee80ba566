// The input pipeline: batches of a dataset, shuffled per epoch, gathered ahead of the trainer
// by worker threads (the seed's multi-thread queue reader). Workers fill a bounded queue; the
// consumer takes batches strictly in order, so the batches are the same whatever the thread
// count or queue depth, and a run resumed from a checkpoint's position sees exactly the
// batches an uninterrupted run would have seen.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>
#include <vector>

#include "runtime/data/fashion_mnist.h"
#include "runtime/data/tensor_dataset.h"
#include "runtime/host_tensor.h"

namespace towerjit {
using Loc = std::source_location;  // as in dsl/tensor.h, without the graph
}

namespace towerjit::data {

struct Batch;

struct PipelineOptions {
  int64_t batch = 128;
  uint64_t seed = 1;        // the shuffle of every epoch derives from (seed, epoch)
  bool shuffle = true;
  bool drop_last = false;   // the last partial batch is kept by default
  int64_t min_batch = 1;    // a last partial batch smaller than this is dropped (e.g. the tower count)
  int threads = 2;          // worker threads gathering batches
  int depth = 4;            // batches prepared ahead of the consumer
  // Runs on a worker after the batch is gathered (augmentation, normalisation). It must be a
  // pure function of the batch (epoch and index included) for resumed runs to see the same
  // data. An exception it throws is rethrown by next() when that batch is due.
  std::function<void(Batch&)> transform = nullptr;  // (= nullptr: designated initialisers may omit it)
  // Set in a world of several processes (TowerTrainer::own_rows): the rows (first, count) of a
  // batch of n examples this process reads; it gathers only those, from the same shuffle as
  // every rank, so no data moves between processes. Unset: every row.
  std::function<std::pair<int64_t, int64_t>(int64_t n)> part = nullptr;
};

// Where a pipeline stands: the batch the next call to next() returns (0-based). A checkpoint
// stores it; a pipeline started at it continues the same sequence of batches.
struct PipelinePosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const PipelinePosition&) const = default;
};

struct Batch {
  int64_t epoch = 0;             // 0-based
  int64_t index = 0;             // within the epoch, 0-based
  int64_t batches_in_epoch = 0;  // index + 1 == batches_in_epoch: the epoch's last batch
  HostFeeds feeds;               // the dataset's arrays by name ("image" f32 [n, features], "label" i32 [n], ...)
  int64_t whole = 0;             // with PipelineOptions::part: the whole batch's examples
  // The examples in the batch: the first dimension its arrays share.
  int64_t size() const {
    return feeds.empty() || feeds.begin()->second.shape.rank() == 0 ? 0 : feeds.begin()->second.shape[0];
  }
  int64_t whole_size() const { return whole > 0 ? whole : size(); }  // every process's rows
};

class BatchPipeline {
 public:
  // Starts `options.threads` workers preparing batches from `start` on. `data` must outlive
  // the pipeline (it is read, not copied). Errors (towerjit::Error, at `loc`): a batch or
  // min_batch below 1, a min_batch above the batch, an empty dataset, a batch larger than the
  // dataset, images and labels that disagree, fewer than one thread or a depth below 1, a
  // start position outside an epoch (a checkpoint from another batch size or dataset).
  BatchPipeline(const Dataset& data, PipelineOptions options, PipelinePosition start = {},
                Loc loc = Loc::current());
  // A temporary dataset would be gone before the workers read it.
  BatchPipeline(Dataset&&, PipelineOptions, PipelinePosition = {}, Loc = Loc::current()) = delete;
  // The same over every array of a dataset of your own (tensor_dataset.h), each batch feeding
  // them under their names.
  BatchPipeline(const TensorDataset& data, PipelineOptions options, PipelinePosition start = {},
                Loc loc = Loc::current());
  BatchPipeline(TensorDataset&&, PipelineOptions, PipelinePosition = {}, Loc = Loc::current()) = delete;
  // Stops and joins the workers promptly, even when they wait on a full queue.
  ~BatchPipeline();
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  // The next batch, in order, waiting for a worker if need be; epochs follow one another for
  // ever. If preparing this batch failed (the transform threw), that exception is rethrown
  // here, the position stays at this batch, and every later call rethrows it too. One
  // consumer thread calls next() and position().
  Batch next();
  // The position of the batch the next call to next() returns: what a checkpoint stores.
  PipelinePosition position() const;
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const PipelineOptions& options() const { return options_; }

 private:
  struct Workers;  // the threads, the batches they prepared and their lock (batch_pipeline.cpp)
  BatchPipeline(DatasetView data, PipelineOptions options, PipelinePosition start, Loc loc);
  void work();
  void stop();
  Batch make(int64_t sequence, int64_t consumer_epoch);

  const DatasetView data_;  // the arrays, not owned
  const PipelineOptions options_;
  const int64_t batches_per_epoch_;
  std::unique_ptr<Workers> w_;
};

// The order in which epoch `epoch` visits the examples 0..size-1: a Fisher-Yates shuffle
// driven by Philox keyed by (seed, epoch), so it is the same on every compiler, standard
// library and machine (a checkpoint resumes the same order anywhere); the identity when
// `shuffle` is false.
std::vector<int64_t> epoch_order(int64_t size, uint64_t seed, int64_t epoch, bool shuffle = true);

// How many batches an epoch of `size` examples gives under `options` (the last partial batch
// counted when kept).
int64_t batches_per_epoch(int64_t size, const PipelineOptions& options);

}  // namespace towerjit::data
