#include "dsl/phase.h"

#include "dsl/graph.h"
#include "dsl/ops_internal.h"

namespace towerjit {

Tensor by_phase(Tensor training, Tensor inference, Loc loc) {
  user_check(training.valid() && inference.valid(), loc)
      << "by_phase: an empty tensor; pass the training and the inference value, both built with ops";
  user_check(&training.graph() == &inference.graph(), loc)
      << "by_phase: the training and the inference value belong to different graphs; build both in one";
  Graph& g = training.graph();
  user_check(training.shape() == inference.shape() && training.dtype() == inference.dtype(), loc)
      << "by_phase: the training value " << training.describe() << " and the inference value "
      << inference.describe() << " differ" << detail::in_scope(g)
      << "; a program must see the same shape and dtype in either phase";
  return detail::make(g, Op::PhaseSelect, {training.id(), inference.id()}, training.shape(),
                      training.dtype(), {}, loc);
}

}  // namespace towerjit
