#include "dsl/tower_program.h"

#include "dsl/autodiff.h"
#include "dsl/collectives.h"
#include "dsl/error.h"
#include "dsl/graph.h"
#include "dsl/ops.h"
#include "dsl/optimizers_sparse.h"
#include "dsl/sparse_gradients.h"
#include "dsl/state.h"

namespace towerjit {
namespace {

// A gradient that is a constant zero: autodiff's answer for a variable the loss never reads.
bool is_zero_constant(const Tensor& g) {
  const Node& n = g.node();
  return n.op == Op::Constant && n.attrs.value == 0;
}

}  // namespace

TowerProgram build_tower_program(Graph& graph, Tensor loss, const Optimizer& optimizer,
                                 const std::optional<ExponentialMovingAverage>& ema, Loc loc) {
  return build_tower_program(graph, loss, optimizer, ema, false, loc);
}

TowerProgram build_tower_program(Graph& graph, Tensor loss, const Optimizer& optimizer,
                                 const std::optional<ExponentialMovingAverage>& ema, bool sparse_collectives,
                                 Loc loc) {
  GraphScope use(graph);
  TowerProgram p;
  for (int u : graph.update_ops) {
    const Node& assign = graph.node(u);
    p.model_updates.push_back({graph.node(assign.inputs[0]).attrs.name, Tensor(&graph, assign.inputs[1])});
  }
  for (int id : graph.trainable_variable_nodes()) p.variables.emplace_back(&graph, id);
  // With loss scaling, gradients of the scaled loss; the optimiser's apply unscales them.
  const std::vector<Tensor> grads = grad(optimizer.scale_loss(loss, loc), p.variables, loc);
  for (size_t i = 0; i < grads.size(); ++i)
    user_check(!is_zero_constant(grads[i]), loc)
        << "variable \"" << p.variables[i].node().attrs.name << "\" (created at "
        << format_location(p.variables[i].node()) << ") is trainable but the loss "
        << "does not depend on it, so the towers would never update it; use it in the model or "
        << "create it with trainable = false";
  std::vector<Tensor> fetched = grads;  // a sparse gradient's values, else the gradient
  std::vector<Tensor> applied(grads.size());  // what the optimiser applies
  for (size_t i = 0; i < p.variables.size(); ++i) {
    p.gradient_shapes.push_back(grads[i].shape());
    p.gradient_inputs.push_back(std::string(TowerProgram::gradient_prefix) + p.variables[i].node().attrs.name);
    const std::optional<SparseGradient> s = sparse_collectives && detail::can_apply_sparse(optimizer)
                                                ? as_sparse(grads[i])
                                                : std::nullopt;
    if (s && s->indices.rank() > 0 && s->indices.shape()[0] == kBatch) {
      const std::string rows = p.gradient_inputs.back() + "/rows";
      Tensor indices = input(rows, s->indices.shape(), DType::i32, loc);
      Tensor values = input(p.gradient_inputs.back(), s->values.shape(), DType::f32, loc);
      p.sparse.push_back({i, rows, s->indices, s->values});
      fetched[i] = s->values;
      applied[i] = detail::sparse_gradient_like(grads[i], indices, values, loc);
    } else {
      applied[i] = all_reduce(grads[i], p.gradient_inputs.back(), loc);
    }
    p.collectives.push_back(applied[i]);
  }
  p.tower_fetches = {loss};
  p.tower_fetches.insert(p.tower_fetches.end(), fetched.begin(), fetched.end());
  for (const auto& u : p.model_updates) p.tower_fetches.push_back(u.value);
  for (const auto& s : p.sparse) p.tower_fetches.push_back(s.indices);
  // Built before the apply so that the schedule reads the global step before its increment;
  // CSE then shares these nodes with the apply's own.
  p.learning_rate = optimizer.learning_rate.at(global_step(loc), loc);
  p.apply_updates = optimizer.apply(applied, p.variables, loc);
  if (optimizer.loss_scale) {
    auto after_apply = [&](const char* name) {  // the variable exists: the apply made it
      return detail::pending_value(detail::state_variable(graph, name, Shape{}, init::zeros(), loc));
    };
    p.loss_scale = after_apply(DynamicLossScale::kScale);
    p.skipped_steps = after_apply(DynamicLossScale::kSkippedSteps);
  }
  if (ema) {
    const std::vector<Tensor> shadows = ema->apply(p.variables, loc);
    p.apply_updates.insert(p.apply_updates.end(), shadows.begin(), shadows.end());
  }
  return p;
}

}  // namespace towerjit
