// fit(): the loop's events (fit_loop.h) around the strategy's way of feeding its towers
// (TowerStrategy::fit); one step() per batch unless the strategy says otherwise.
#include "runtime/towers/fit.h"

#include "dsl/error.h"
#include "dsl/index_errors.h"
#include "runtime/dist/checked_transport.h"
#include "runtime/dist/world.h"
#include "runtime/towers/fit_loop.h"
#include "runtime/towers/tower_strategy.h"
#include "runtime/towers/trainer_internals.h"

namespace towerjit {
namespace detail {

// One step() per batch: every tower waits for the others (sync), or async towers each apply
// as soon as they are done but the next batch starts when all are.
void TowerStrategy::fit(FitLoop& loop, int accumulate, Loc loc) {
  while (!loop.done()) {
    auto [batch, event] = loop.next();
    const auto start = Clock::now();
    StepResult result;
    try {
      result = accumulate > 1 ? accumulated_step(batch.feeds, accumulate, loc) : step(batch.feeds, batch.whole, loc);
    } catch (const IndexOutOfRange& e) {
      throw e.at_step(loop.step_in_words(event));
    }
    event.seconds = seconds_since(start);
    event.loss = result.loss;
    event.learning_rate = result.learning_rate;
    loop.trained(event, {{event.step, &batch.feeds}});
  }
}

}  // namespace detail

StepEvent fit(TowerTrainer& trainer, data::BatchPipeline& pipeline, const FitOptions& options, Loc loc) {
  const dist::UserCall at(loc);  // a transport failure while training names this call
  user_check(options.epochs.value_or(1) >= 1, loc) << "fit: epochs " << *options.epochs << " must be at least 1";
  user_check(options.max_steps >= 0, loc)
      << "fit: max_steps " << options.max_steps << " must be 0 (no limit) or positive";
  if (options.epochs && options.max_steps > 0) {
    const int64_t per_epoch = pipeline.batches_per_epoch();
    const int64_t held = *options.epochs * per_epoch;
    user_check(options.max_steps <= held, loc)
        << "fit: max_steps " << options.max_steps << " is more than the " << held << " steps that epochs = "
        << *options.epochs << " holds (" << per_epoch << " batches an epoch), so training would stop at step " << held
        << "; leave epochs unset to train " << options.max_steps << " steps, or set epochs = "
        << (options.max_steps + per_epoch - 1) / per_epoch;
  }
  detail::TowerStrategy& strategy = detail::TrainerAccess::strategy(trainer);
  // Watching starts after the argument checks and stops when fit returns or throws. A strategy
  // whose ranks share no step to stop after (the parameter server and its workers) never
  // watches: mpirun ends them all.
  const bool watching = options.stop_on_signals && strategy.stops_on_signals();
  const bool shared = trainer.world_layout().towers_of_rank.size() > 1;
  const InterruptWatch watch(watching);
  detail::FitLoop loop(trainer, pipeline, options, watch, watching && shared ? &dist::world(loc) : nullptr, loc);
  user_check(options.accumulate == 1 || !strategy.applies_each_gradient(), loc)
      << "fit: accumulate " << options.accumulate << " needs sync towers; async towers apply each gradient as it comes";
  strategy.fit(loop, options.accumulate, loc);
  return loop.end();
}

}  // namespace towerjit
