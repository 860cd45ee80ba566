#include "runtime/towers/fit_loop.h"

#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "dsl/error.h"
#include "runtime/dist/world.h"
#include "runtime/towers/non_finite_inputs.h"

namespace towerjit::detail {
namespace {

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

}  // namespace

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

FitLoop::FitLoop(TowerTrainer& trainer, data::BatchPipeline& pipeline, const FitOptions& options,
                 const InterruptWatch& watch, dist::Transport* agree_over, Loc loc)
    : trainer_(trainer), pipeline_(pipeline), options_(options), watch_(watch), agree_over_(agree_over), loc_(loc),
      per_epoch_(pipeline.batches_per_epoch()) {
  last_.next = pipeline_.position();
  last_.step = step_of(last_.next);
  for (Hook* h : options_.hooks) h->begin(trainer_, last_.next);
  previous_ = Clock::now();
}

bool FitLoop::done() const {
  const data::PipelinePosition p = pipeline_.position();
  // Without epochs, max_steps alone decides where it is set.
  const int64_t epochs = options_.epochs.value_or(options_.max_steps > 0 ? std::numeric_limits<int64_t>::max() : 1);
  return p.epoch >= epochs || (options_.max_steps > 0 && step_of(p) >= options_.max_steps) ||
         stop_signal() != 0;
}

std::pair<data::Batch, StepEvent> FitLoop::next() {
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

bool FitLoop::hooks_use_trainer(const StepEvent& e) const {
  for (const Hook* h : options_.hooks)
    if (h->uses_trainer_at(e)) return true;
  return false;
}

void FitLoop::trained(StepEvent e, const std::vector<Suspect>& suspects) {
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

std::string FitLoop::step_in_words(const StepEvent& e) {
  return "step " + std::to_string(e.step) + "'s batch (epoch " + std::to_string(e.epoch + 1) + ", batch " +
         std::to_string(e.batch_in_epoch + 1) + " of " + std::to_string(e.batches_per_epoch) + ")";
}

StepEvent FitLoop::end() {
  // Read once: a signal that comes during the hooks' end still counts as this stop (alone;
  // over several processes only what the ranks agreed on counts).
  last_.stopped_by = stop_signal();
  for (Hook* h : options_.hooks) h->end(trainer_, last_);
  if (last_.stopped_by != 0) interrupted();
  return last_;
}

void FitLoop::interrupted() const {
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
std::string FitLoop::kept_state() const {
  std::string kept;
  for (const Hook* h : options_.hooks)
    if (const std::string k = h->kept_state(); !k.empty()) kept = k;
  return kept;
}

// The error for a loss that is NaN or infinite: where, what caused it (a non-finite input, or
// else the training itself), and what is kept.
void FitLoop::non_finite_loss(const StepEvent& e, const std::vector<Suspect>& suspects) const {
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

// Every rank's signals so far, summed at the end of each step: a signal any rank has received
// (mpirun turns a Ctrl-C into a SIGTERM to every rank, a second later a SIGKILL) stops them
// all after this same step, so none waits in a collective of the next. 16 bytes a step.
void FitLoop::agree_on_signals() {
  const int mine = watch_.received();  // SIGINT, SIGTERM or 0
  double seen[2] = {mine == SIGINT ? 1.0 : 0.0, mine == SIGTERM ? 1.0 : 0.0};
  agree_over_->all_reduce_sum(seen, 2);
  agreed_signal_ = seen[0] > 0 ? SIGINT : seen[1] > 0 ? SIGTERM : 0;
}

}  // namespace towerjit::detail
