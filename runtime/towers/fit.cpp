#include "runtime/towers/fit.h"

#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <limits>
#include <optional>
#include <sstream>

#include "dsl/error.h"
#include "runtime/dist/world.h"
#include "runtime/towers/async_towers.h"
#include "runtime/towers/async_world.h"
#include "runtime/towers/non_finite_inputs.h"

namespace towerjit {
namespace {

using Clock = std::chrono::steady_clock;

// A batch whose inputs may have fed a loss: the batch of that step, and, with free-running
// async towers, the later batches in flight, whose applies the step's slices may have seen.
struct Suspect {
  int64_t step;
  const HostFeeds* feeds;
};

// Why a loss went NaN or infinite, as far as the batches can tell: the first input element that
// is not finite, or, when every input is finite, the training itself.
std::string cause_of_non_finite_loss(int64_t step, const std::vector<Suspect>& batches) {
  for (const Suspect& b : batches)
    if (const std::string bad = first_non_finite_input(*b.feeds); !bad.empty())
      return (b.step == step ? "the batch's " : "step " + std::to_string(b.step) + "'s batch (async towers had it in flight): ") +
             bad + " of the batch: the data is the cause, not the learning rate; check the dataset and its transform";
  return "every input of the batch is finite, so the training diverged: lower the learning rate or clip the "
         "gradients (Optimizer::with_clip_by_global_norm)";
}

// The order of events both loops share: which batch is next, when to stop, and what happens
// once a batch is trained (the NaN check, then the hooks).
class Loop {
 public:
  // `agree_over`: the world whose ranks train in lockstep (sync towers over several
  // processes), which then stop after the same step; null for a process alone.
  Loop(TowerTrainer& trainer, data::BatchPipeline& pipeline, const FitOptions& options, const InterruptWatch& watch,
       dist::Transport* agree_over, Loc loc)
      : trainer_(trainer), pipeline_(pipeline), options_(options), watch_(watch), agree_over_(agree_over), loc_(loc),
        per_epoch_(pipeline.batches_per_epoch()) {
    last_.next = pipeline_.position();
    last_.step = step_of(last_.next);
    for (Hook* h : options_.hooks) h->begin(trainer_, last_.next);
    previous_ = Clock::now();
  }

  bool done() const {
    const data::PipelinePosition p = pipeline_.position();
    return p.epoch >= options_.epochs || (options_.max_steps > 0 && step_of(p) >= options_.max_steps) ||
           stop_signal() != 0;
  }

  // The next batch, and the event it will give (all but its loss, rate and time).
  std::pair<data::Batch, StepEvent> next() {
    data::Batch batch = pipeline_.next();
    StepEvent e;
    e.next = pipeline_.position();
    e.step = step_of(e.next);
    e.epoch = batch.epoch;
    e.batch_in_epoch = batch.index;
    e.batches_per_epoch = batch.batches_in_epoch;
    e.examples = batch.whole_size();
    return {std::move(batch), e};
  }

  // Whether a hook will use the trainer once batch `e` is trained.
  bool hooks_use_trainer(const StepEvent& e) const {
    for (const Hook* h : options_.hooks)
      if (h->uses_trainer_at(e)) return true;
    return false;
  }

  // Batch `e` is trained, loss, rate and seconds filled in: the NaN check (naming a
  // non-finite input of `suspects`, the batches that may have fed the loss), then the hooks.
  void trained(StepEvent e, const std::vector<Suspect>& suspects) {
    const auto finish = Clock::now();
    e.samples_per_s = e.examples / std::max(1e-9, std::chrono::duration<double>(finish - previous_).count());
    if (!std::isfinite(e.loss)) non_finite_loss(e, suspects);
    last_ = e;
    for (Hook* h : options_.hooks) h->after_step(trainer_, e);
    if (e.batch_in_epoch + 1 == e.batches_per_epoch)
      for (Hook* h : options_.hooks) h->after_epoch(trainer_, e);
    if (agree_over_) agree_on_signals();
    previous_ = Clock::now();  // the hooks' time (an evaluation) is not the next step's
  }

  // The hooks' end; then, when a signal stopped the run, Interrupted.
  StepEvent end() {
    // Read once: a signal that comes during the hooks' end still counts as this stop (alone;
    // over several processes only what the ranks agreed on counts).
    last_.stopped_by = stop_signal();
    for (Hook* h : options_.hooks) h->end(trainer_, last_);
    if (last_.stopped_by != 0) interrupted();
    return last_;
  }

  [[noreturn]] void interrupted() const {
    const std::string kept = kept_state();
    std::ostringstream message;
    message << "towerjit: training stopped by " << signal_name(last_.stopped_by) << " after step " << last_.step;
    if (last_.batches_per_epoch > 0)
      message << " (epoch " << last_.epoch + 1 << ", batch " << last_.batch_in_epoch + 1 << " of "
              << last_.batches_per_epoch << ")";
    message << "; "
            << (kept.empty() ? "no checkpoint is kept (a CheckpointHook, or the examples' --checkpoint DIR, keeps one)"
                             : kept + " is kept: resume from it")
            << " (" << format_location(loc_) << ")";
    throw Interrupted(message.str(), last_.stopped_by, last_.step);
  }

  // What the last hook that keeps something has kept, or "".
  std::string kept_state() const {
    std::string kept;
    for (const Hook* h : options_.hooks)
      if (const std::string k = h->kept_state(); !k.empty()) kept = k;
    return kept;
  }

  // The error for a loss that is NaN or infinite: where, what caused it (a non-finite input, or
  // else the training itself), and what is kept.
  [[noreturn]] void non_finite_loss(const StepEvent& e, const std::vector<Suspect>& suspects) const {
    const std::string kept = kept_state();
    user_check(false, loc_)
        << "the loss is " << (std::isnan(e.loss) ? "NaN" : e.loss > 0 ? "+inf" : "-inf") << " at step " << e.step
        << " (epoch " << e.epoch + 1 << ", batch " << e.batch_in_epoch + 1 << " of " << e.batches_per_epoch
        << "); training stopped; "
        << (kept.empty() ? "no checkpoint is kept (a CheckpointHook, or the examples' --checkpoint DIR, keeps one)"
                         : kept + " is kept")
        << "; " << cause_of_non_finite_loss(e.step, suspects);
    std::abort();  // not reached: user_check threw
  }

 private:
  int64_t step_of(const data::PipelinePosition& p) const { return p.epoch * per_epoch_ + p.batch; }

  // The signal that stops the run: this process's, or the one the ranks agreed on.
  int stop_signal() const { return agree_over_ ? agreed_signal_ : watch_.received(); }

  // Every rank's signals so far, summed at the end of each step: a signal any rank has received
  // (mpirun turns a Ctrl-C into a SIGTERM to every rank, a second later a SIGKILL) stops them
  // all after this same step, so none waits in a collective of the next. 16 bytes a step.
  void agree_on_signals() {
    const int mine = watch_.received();  // SIGINT, SIGTERM or 0
    double seen[2] = {mine == SIGINT ? 1.0 : 0.0, mine == SIGTERM ? 1.0 : 0.0};
    try {
      agree_over_->all_reduce_sum(seen, 2);
    } catch (const std::runtime_error& e) {
      user_check(false, loc_) << dist::rank_prefix() << "agreeing on a stop after step " << last_.step
                              << " failed: " << e.what();
    }
    agreed_signal_ = seen[0] > 0 ? SIGINT : seen[1] > 0 ? SIGTERM : 0;
  }

  TowerTrainer& trainer_;
  data::BatchPipeline& pipeline_;
  const FitOptions& options_;
  const InterruptWatch& watch_;
  dist::Transport* const agree_over_;
  int agreed_signal_ = 0;
  Loc loc_;
  const int64_t per_epoch_;
  StepEvent last_;
  Clock::time_point previous_;
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One step() per batch: every tower waits for the others (sync), or async towers each apply
// as soon as they are done but the next batch starts when all are.
void fit_stepwise(TowerTrainer& trainer, Loop& loop, int accumulate, Loc loc) {
  while (!loop.done()) {
    auto [batch, event] = loop.next();
    const auto start = Clock::now();
    const TowerTrainer::StepResult result = trainer.step(
        batch.feeds, {.check_loss = false, .whole_batch = batch.whole, .accumulate = accumulate}, loc);
    event.seconds = seconds_since(start);
    event.loss = result.loss;
    event.learning_rate = result.learning_rate;
    loop.trained(event, {{event.step, &batch.feeds}});
  }
}

// Async towers running free: each tower takes its slice of batch after batch from its own
// queue, up to AsyncTowers::window() batches ahead of the slowest, while this thread reads the
// pipeline and reports each batch once every tower has applied its slice. A step whose hooks
// use the trainer (an evaluation, a checkpoint) is a quiet point: no later batch is handed
// out until those hooks return, so they see exactly the applies of the batches before.
void fit_free(TowerTrainer& trainer, Loop& loop, Loc loc) {
  struct InFlight {
    StepEvent event;
    HostFeeds feeds;              // the whole batch, for the NaN check's message
    std::vector<double> weights;  // n_i / B: the batch's loss is the slices' weighted sum
    Clock::time_point submitted;
    int towers_left = 0;
    bool quiet = false;
  };
  AsyncTowers towers(trainer);
  const int n = trainer.towers().size();
  const int64_t window = AsyncTowers::window(trainer.towers().reduction());
  std::deque<InFlight> in_flight;
  while (true) {
    const bool can_submit = !loop.done() && static_cast<int64_t>(in_flight.size()) < window &&
                            (in_flight.empty() || !in_flight.back().quiet);
    if (can_submit) {
      auto [batch, event] = loop.next();
      const std::vector<int64_t> slices = trainer.towers().slices(event.examples, loc);
      InFlight f{.event = event, .submitted = Clock::now(), .towers_left = n,
                 .quiet = loop.hooks_use_trainer(event)};
      std::vector<HostFeeds> feeds = trainer.slice_batch(batch.feeds, slices, loc);
      for (int t = 0; t < n; ++t) {
        f.weights.push_back(static_cast<double>(slices[t]) / event.examples);
        towers.submit(t, std::move(feeds[t]), event.step);
      }
      f.feeds = std::move(batch.feeds);  // the slices are copies
      in_flight.push_back(std::move(f));
      continue;
    }
    if (in_flight.empty()) return;
    const AsyncTowers::Done d = towers.next_done();
    InFlight& f = in_flight[d.tag - in_flight.front().event.step];
    f.event.loss += f.weights[d.tower] * d.loss;
    f.event.learning_rate = d.learning_rate;  // the batch's last apply
    --f.towers_left;
    // Batches are reported in order, each once all its slices are applied.
    while (!in_flight.empty() && in_flight.front().towers_left == 0) {
      std::vector<Suspect> suspects;
      for (const InFlight& f : in_flight) suspects.push_back({f.event.step, &f.feeds});
      InFlight& ready = in_flight.front();
      ready.event.seconds = seconds_since(ready.submitted);
      loop.trained(ready.event, suspects);
      in_flight.pop_front();
    }
  }
}

// Async towers across processes, a worker's side: its towers' rows of every batch, pushed to
// the parameter server tower by tower (runtime/towers/async_world.h). The server reports.
void fit_async_worker(TowerTrainer& trainer, Loop& loop, Loc loc) {
  AsyncWorker worker(trainer);
  while (!loop.done()) {
    auto [batch, event] = loop.next();
    worker.work(event.step, batch.feeds, event.examples, loc);
  }
}

// The parameter server's side: applies every push as it comes, and reports each batch to the
// hooks, in order, once every world tower's slice of it is applied. While a batch whose hooks
// use the trainer is unfinished, pushes of later batches wait (received, not applied), so those
// hooks see exactly the applies of the batches before it; so do pushes of a tower past the
// staleness bound. The slowest tower's next push is always for the earliest unfinished batch
// and always within the bound, so something can always be applied.
void fit_async_server(TowerTrainer& trainer, Loop& loop, Loc loc) {
  struct Pending {
    StepEvent event;
    std::vector<double> weights;  // n_i / B over the world's towers
    int towers_left = 0;
    bool quiet = false;
  };
  AsyncServer server(trainer);
  const int towers = trainer.world_layout().towers();
  std::deque<Pending> pending;  // batches handed out and not yet reported, in order
  std::deque<AsyncServer::Push> held;
  int64_t last_created = -1;
  auto create_through = [&](int64_t step) {
    while (last_created < step) {
      internal_check(!loop.done());  // every rank reads the same batches
      auto [batch, event] = loop.next();
      Pending p{.event = event, .towers_left = towers, .quiet = loop.hooks_use_trainer(event)};
      for (int64_t n : split_batch(event.examples, towers, trainer.towers().split_policy(), loc))
        p.weights.push_back(static_cast<double>(n) / event.examples);
      last_created = event.step;
      pending.push_back(std::move(p));
    }
  };
  // The first unfinished batch whose hooks use the trainer: no later push is applied before it.
  auto barrier = [&] {
    for (const Pending& p : pending)
      if (p.quiet) return p.event.step;
    return std::numeric_limits<int64_t>::max();
  };
  while (!(pending.empty() && loop.done())) {
    // The first held push that may go now, else the next from the network (held in turn
    // if it may not: a later batch than a quiet one, or a tower past the staleness bound).
    std::optional<AsyncServer::Push> push;
    for (auto it = held.begin(); it != held.end(); ++it)
      if (it->step <= barrier() && server.may_apply(*it)) {
        push = std::move(*it);
        held.erase(it);
        break;
      }
    if (!push) {
      push = server.receive();
      create_through(push->step);
      if (push->step > barrier() || !server.may_apply(*push)) {
        held.push_back(std::move(*push));
        continue;
      }
    }
    const AsyncServer::Applied a = server.apply(std::move(*push));
    Pending& p = pending[a.step - pending.front().event.step];
    p.event.loss += p.weights[a.tower] * a.loss;
    p.event.learning_rate = a.learning_rate;
    --p.towers_left;
    while (!pending.empty() && pending.front().towers_left == 0) {
      loop.trained(pending.front().event, {});
      pending.pop_front();
    }
  }
}

}  // namespace

StepEvent fit(TowerTrainer& trainer, data::BatchPipeline& pipeline, const FitOptions& options, Loc loc) {
  user_check(options.epochs >= 1, loc) << "fit: epochs " << options.epochs << " must be at least 1";
  user_check(options.max_steps >= 0, loc)
      << "fit: max_steps " << options.max_steps << " must be 0 (no limit) or positive";
  // Watching starts after the argument checks and stops when fit returns or throws. Async
  // towers over several processes never watch: the parameter server and its workers have no
  // common step to stop after (mpirun ends them all).
  const bool watching = options.stop_on_signals && !trainer.async_world();
  const bool shared = trainer.world_layout().towers_of_rank.size() > 1;
  const InterruptWatch watch(watching);
  Loop loop(trainer, pipeline, options, watch, watching && shared ? &dist::world(loc) : nullptr, loc);
  user_check(options.accumulate == 1 || !is_async(trainer.towers().reduction()), loc)
      << "fit: accumulate " << options.accumulate << " needs sync towers; async towers apply each gradient as it comes";
  if (trainer.parameter_server_rank()) fit_async_server(trainer, loop, loc);
  else if (trainer.async_world()) fit_async_worker(trainer, loop, loc);
  else if (is_async(trainer.towers().reduction()) && trainer.towers().size() > 1) fit_free(trainer, loop, loc);
  else fit_stepwise(trainer, loop, options.accumulate, loc);
  return loop.end();
}

}  // namespace towerjit
