#include "runtime/towers/fit.h"

#include <chrono>
#include <cmath>

#include "dsl/error.h"

namespace towerjit {

StepEvent fit(TowerTrainer& trainer, data::BatchPipeline& pipeline, const FitOptions& options, Loc loc) {
  user_check(options.epochs >= 1, loc) << "fit: epochs " << options.epochs << " must be at least 1";
  user_check(options.max_steps >= 0, loc)
      << "fit: max_steps " << options.max_steps << " must be 0 (no limit) or positive";
  using Clock = std::chrono::steady_clock;
  const int64_t per_epoch = pipeline.batches_per_epoch();
  auto step_of = [&](const data::PipelinePosition& p) { return p.epoch * per_epoch + p.batch; };
  auto done = [&](const data::PipelinePosition& p) {
    return p.epoch >= options.epochs || (options.max_steps > 0 && step_of(p) >= options.max_steps);
  };

  StepEvent event;
  event.next = pipeline.position();
  event.step = step_of(event.next);
  for (Hook* h : options.hooks) h->begin(trainer, event.next);
  auto previous = Clock::now();
  while (!done(pipeline.position())) {
    const data::Batch batch = pipeline.next();
    const auto start = Clock::now();
    const TowerTrainer::StepResult result = trainer.step(batch.feeds, loc);
    const auto finish = Clock::now();
    event.next = pipeline.position();
    event.step = step_of(event.next);
    event.epoch = batch.epoch;
    event.batch_in_epoch = batch.index;
    event.batches_per_epoch = batch.batches_in_epoch;
    event.examples = batch.size();
    event.loss = result.loss;
    event.learning_rate = result.learning_rate;
    event.seconds = std::chrono::duration<double>(finish - start).count();
    const double since_previous = std::chrono::duration<double>(finish - previous).count();
    event.samples_per_s = event.examples / std::max(1e-9, since_previous);
    user_check(std::isfinite(result.loss), loc)
        << "the loss is " << (std::isnan(result.loss) ? "NaN" : result.loss > 0 ? "+inf" : "-inf")
        << " at step " << event.step << " (epoch " << batch.epoch + 1 << ", batch " << batch.index + 1 << " of " << batch.batches_in_epoch << "); training stopped "
        << "and the last checkpoint written before it is kept; lower the learning rate or clip "
        << "the gradients (Optimizer::with_clip_by_global_norm)";
    for (Hook* h : options.hooks) h->after_step(trainer, event);
    if (batch.index + 1 == batch.batches_in_epoch)
      for (Hook* h : options.hooks) h->after_epoch(trainer, event);
    previous = Clock::now();  // the hooks' time (an evaluation) is not the next step's
  }
  for (Hook* h : options.hooks) h->end(trainer, event);
  return event;
}

}  // namespace towerjit
