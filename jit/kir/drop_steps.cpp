#include "jit/kir/drop_steps.h"

namespace towerjit::kir {

Program drop_steps(Program p, const std::set<int>& dropped) {
  if (dropped.empty()) return p;
  std::vector<Step> steps;
  std::vector<Kernel> kernels;
  std::vector<LibraryCall> calls;
  for (int s = 0; s < static_cast<int>(p.steps.size()); ++s) {
    if (dropped.count(s)) continue;
    Step step = p.steps[s];
    if (step.kind == Step::Kind::kernel) {
      kernels.push_back(std::move(p.kernels[step.index]));
      step.index = static_cast<int>(kernels.size()) - 1;
    } else if (step.kind == Step::Kind::library) {
      calls.push_back(std::move(p.calls[step.index]));
      step.index = static_cast<int>(calls.size()) - 1;
    }
    steps.push_back(step);
  }
  p.steps = std::move(steps);
  p.kernels = std::move(kernels);
  p.calls = std::move(calls);
  return p;
}

}  // namespace towerjit::kir
