// Synchronous towers that are all GPUs, with the variables kept on the GPUs
// (TOWERJIT_GPU_VARIABLES=on): one copy per GPU, the reduction (in-device sums, NCCL between
// GPUs, MPI between processes, in 16 bits with gradient compression; a sparse gradient's rows concatenated on the host) and the apply
// on the GPUs (runtime/towers/gpu_resident_sync.h);
// the host copy is a cache refreshed when asked for. fit() copies each batch to the GPUs while
// the step before it trains (runtime/towers/feed_prefetch.h) and queues each step behind the one
// before where it can (GpuResidentSync::queue); TOWERJIT_PREFETCH_FEEDS.
#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <tuple>

#include "dsl/error.h"
#include "dsl/index_errors.h"
#include "runtime/towers/feed_prefetch.h"
#include "runtime/towers/fit_loop.h"
#include "runtime/towers/gpu_resident_sync.h"
#include "runtime/towers/tower_strategy.h"

namespace towerjit::detail {
namespace {

class SyncGpu final : public TowerStrategy {
 public:
  SyncGpu(TowerState& state, Loc loc) : TowerStrategy(state), host_(state.compiled.initial) {
    const CompiledTowers& c = state.compiled;
    GpuResidentSync::Setup setup{.apply_graph = &c.apply_side->graph, .apply_fetches = c.apply_fetches,
                                 .apply_updates = c.apply_updates, .gradient_inputs = c.gradient_inputs,
                                 .gradient_scale = TowerProgram::gradient_scale, .world = state.world,
                                 .bucket_mb = state.options.bucket_mb,
                                 .compression = state.options.gradient_compression};
    for (const auto& p : c.tower_step) setup.towers.push_back(p->cuda());
    for (const auto& u : c.model_updates) setup.model_update_variables.push_back(u.variable);
    for (const auto& k : c.sparse) setup.sparse.push_back({k.variable, k.rows_input});
    towers_ = setup.towers;
    gpus_ = std::make_unique<GpuResidentSync>(setup, host_, loc);
  }

  StepResult step(const HostFeeds& batch, int64_t whole_batch, Loc loc) override {
    const BatchSplit split = split_step_batch(batch, whole_batch, state_.towers, state_.layout, loc);
    std::vector<GpuResidentSync::TowerFeeds> feeds;
    for (const HostFeeds& slice : split.feeds) feeds.push_back({.host = &slice});
    return run(split, feeds);
  }

  void fit(FitLoop& loop, int accumulate, Loc loc) override {
    if (accumulate > 1 || !state_.options.prefetch_feeds) return TowerStrategy::fit(loop, accumulate, loc);
    if (!prefetch_) prefetch_ = std::make_unique<FeedPrefetcher>(towers_);
    try {
      fit_prefetching(loop, loc);
    } catch (...) {
      // A hook that threw while the next step was queued: that step runs to its end (it is
      // applied, though not reported), and nothing stays in flight.
      if (gpus_->in_flight()) try {
          gpus_->finish();
        } catch (...) {
        }
      prefetch_->drop();
      throw;
    }
    prefetch_->drop();  // a batch read ahead of a stop
  }

  HostVariables& variables() override {
    if (host_stale_) gpus_->download(host_);
    host_stale_ = false;
    return host_;
  }
  void restore(const HostVariables& values) override {
    host_ = values;
    gpus_->upload(values);
    host_stale_ = false;
  }
  std::map<std::string, std::vector<Device>> variable_devices() const override {
    std::vector<Device> gpus;
    for (const Device& d : state_.towers.devices())
      if (std::find(gpus.begin(), gpus.end(), d) == gpus.end()) gpus.push_back(d);
    std::map<std::string, std::vector<Device>> out;
    for (const auto& [name, value] : host_) out[name] = gpus;
    return out;
  }
  void list_programs(const AddProgram& add) const override {
    for (const CudaProgram* p : gpus_->programs())
      add(p->name(),
          p->name().starts_with("apply")   ? "once per step per copy of the variables, on the reduced gradients"
          : p->name().starts_with("widen") ? "on each GPU, the compressed all-reduce's totals widened to f32"
                                           : "on each GPU, summing its towers' or the GPUs' values",
          p->lowered_graph(), p->program());
  }
  void name_trace_rows(report::Trace& trace) const override { trace.name_thread(kApplyRow, "apply"); }


 private:
  using TowerFeeds = GpuResidentSync::TowerFeeds;

  // One step on `split`, each of this process's towers fed `feeds[t]`, waited for.
  StepResult run(const BatchSplit& split, const std::vector<TowerFeeds>& feeds) {
    report::Trace::Span span = state_.traced("step on the GPUs", "compute", kReduceRow);
    const int64_t applies = state_.applies;
    const GpuResidentSync::Result r = gpus_->step(feeds, split.own_weights(), split.own_shares(), keys(split, applies),
                                                  on_tower_threads());
    span.end();
    host_stale_ = true;
    ++state_.applies;
    return result_of(split, r);
  }

  // A step on `split` queued behind the one in flight, if any (GpuResidentSync::queue): that
  // one's results.
  std::optional<GpuResidentSync::Result> queue(const BatchSplit& split, const std::vector<TowerFeeds>& feeds) {
    report::Trace::Span span = state_.traced("step queued on the GPUs", "compute", kReduceRow);
    const int64_t applies = state_.applies;
    std::optional<GpuResidentSync::Result> previous =
        gpus_->queue(feeds, split.own_weights(), split.own_shares(), keys(split, applies), on_tower_threads());
    host_stale_ = true;
    ++state_.applies;
    return previous;
  }

  // Tower t's random numbers in the step after `applies` applies.
  static std::function<uint64_t(int)> keys(const BatchSplit& split, int64_t applies) {
    return [applies, first = split.first](int t) { return random_key(applies, first + t); };
  }
  std::function<void(int, const std::function<void(int)>&)> on_tower_threads() {
    return [this](int count, const std::function<void(int)>& body) { state_.on_tower_threads(count, body); };
  }

  // The batch's mean loss (the towers' weighted by their slices, over every process) and the
  // learning rate, from what the GPUs returned.
  StepResult result_of(const BatchSplit& split, const GpuResidentSync::Result& r) {
    StepResult result;
    result.slices = split.slices;
    result.learning_rate = state_.applied(r.apply_fetched);
    result.loss = mean_loss(split, r.losses);
    state_.world->all_reduce_sum(&result.loss, 1);  // the other processes' towers' share (errors: the transport's)
    return result;
  }
  static double mean_loss(const BatchSplit& split, const std::vector<double>& losses) {
    const std::vector<double> shares = split.own_shares();
    double loss = 0;
    for (size_t t = 0; t < losses.size(); ++t) loss += shares[t] * losses[t];
    return loss;
  }

  // fit()'s loop. Each batch is read from the pipeline and handed to the prefetcher as the
  // batch before it starts training; where the sums stay on the GPUs in one process
  // (GpuResidentSync::overlaps), each step is also queued behind the one before, whose
  // results (its loss, read from page-locked memory, and its learning rate) are collected
  // while the new one runs: its hooks run with the next step already on the GPU.
  //
  // The batches, their order and the bits are those of the plain loop:
  // - a step is queued behind another only when that one's loss is finite (its towers are
  //   waited for first): a NaN stops training with no later step applied;
  // - after a step whose hooks use the trainer (an evaluation, a checkpoint), the next batch is
  //   read and queued only once they have run;
  // - a stop asked for lets the step in flight finish and be reported, and queues no other (a
  //   batch read ahead stays untrained; a checkpoint's position is the last step's);
  // - a batch the pipeline could not make (its transform threw) or whose split is wrong (its
  //   inputs disagree on the batch size) raises its error at its own turn, after the batches
  //   before it have trained and their hooks have run.
  void fit_prefetching(FitLoop& loop, Loc loc) {
    struct Ahead {
      data::Batch batch;
      StepEvent event;
      BatchSplit split;
      std::exception_ptr error;  // reading or planning it failed: raised at the batch's turn
      Clock::time_point queued;
    };
    std::unique_ptr<Ahead> next, running;  // read ahead (its copy under way); queued, not reported
    auto read_ahead = [&] {
      next = std::make_unique<Ahead>();
      try {
        std::tie(next->batch, next->event) = loop.next();
        next->split = plan_step_batch(next->batch.feeds, next->batch.whole, state_.towers, state_.layout, loc);
        std::vector<FeedPrefetcher::Rows> rows;
        for (int t = 0; t < next->split.own; ++t) rows.push_back({next->split.fed_row_of(t), next->split.slice(t)});
        prefetch_->prefetch(next->batch.feeds, std::move(rows));
      } catch (...) {
        next->error = std::current_exception();
      }
    };
    auto report = [&](Ahead& done, const GpuResidentSync::Result& r) {
      const StepResult result = result_of(done.split, r);
      done.event.seconds = seconds_since(done.queued);
      done.event.loss = result.loss;
      done.event.learning_rate = result.learning_rate;
      loop.trained(done.event, {{done.event.step, &done.batch.feeds}});
    };
    auto at_step = [&](const Ahead& a, auto&& body) {
      try {
        return body();
      } catch (const IndexOutOfRange& e) {
        throw e.at_step(loop.step_in_words(a.event));
      }
    };
    if (!loop.done()) read_ahead();
    while (next || running) {
      if (running) {
        const std::vector<double> losses = at_step(*running, [&] { return gpus_->wait_towers(); });
        const bool queue_behind = next && !next->error && !loop.stop_requested() && gpus_->overlaps() &&
                                  std::isfinite(mean_loss(running->split, losses));
        if (!queue_behind) {
          report(*running, at_step(*running, [&] { return gpus_->finish(); }));
          running.reset();
          if (loop.stop_requested()) return;
          if (!next && !loop.done()) read_ahead();
          continue;
        }
      }
      std::unique_ptr<Ahead> now = std::move(next);
      if (now->error) std::rethrow_exception(now->error);
      if (!loop.hooks_use_trainer(now->event) && !loop.done()) read_ahead();
      now->queued = Clock::now();
      const std::optional<GpuResidentSync::Result> previous = at_step(*now, [&] {
        const FeedPrefetcher::Ready ready = prefetch_->take();
        std::vector<TowerFeeds> feeds;
        for (size_t t = 0; t < ready.feeds.size(); ++t)
          feeds.push_back({.device = ready.feeds[t], .uploaded = ready.uploaded[t]});
        std::optional<GpuResidentSync::Result> r = queue(now->split, feeds);
        prefetch_->release();
        return r;
      });
      if (running) report(*running, *previous);
      running = std::move(now);
    }
  }

  HostVariables host_;
  bool host_stale_ = false;  // host_ lags the GPUs' copies
  std::vector<CudaProgram*> towers_;  // this process's towers' programs
  std::unique_ptr<GpuResidentSync> gpus_;
  std::unique_ptr<FeedPrefetcher> prefetch_;  // made by the first fit() that prefetches
};

}  // namespace

std::unique_ptr<TowerStrategy> make_sync_gpu(TowerState& state, Loc loc) {
  return std::make_unique<SyncGpu>(state, loc);
}

}  // namespace towerjit::detail
