#include "runtime/towers/histogram_hook.h"

#include <cstdio>

#include "dsl/error.h"
#include "runtime/towers/tower_trainer.h"

namespace towerjit {

HistogramHook::HistogramHook(const Graph& graph, report::TensorBoardWriter& writer, int64_t every, Loc loc)
    : graph_(graph), writer_(writer), every_(every) {
  user_check(every >= 1, loc) << "histograms every " << every << " steps: give N >= 1 (or no histograms)";
}

void HistogramHook::after_step(TowerTrainer& trainer, const StepEvent& e) {
  if (e.step % every_ != 0 || !writer_.enabled()) return;
  for (const auto& [name, value] : trainer.variables()) {
    const VariableInfo* info = graph_.find_variable(name);
    if (info == nullptr || !info->trainable || value.dtype != DType::f32) continue;
    writer_.histogram("weights/" + name, e.step, value.f32);
  }
  const std::map<std::string, const HostTensor*> gradients = trainer.last_gradients();
  if (gradients.empty() && !said_no_gradients_) {
    said_no_gradients_ = true;
    std::fprintf(stderr,
                 "towerjit: note: histograms of the weights only: %s keeps no gradients in host memory (sync "
                 "towers with their variables on the host do; async towers and variables on the GPUs do not)\n",
                 trainer.towers().str().c_str());
  }
  for (const auto& [name, value] : gradients) writer_.histogram("gradients/" + name, e.step, value->f32);
}

}  // namespace towerjit
