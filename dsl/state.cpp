// The global step and the state variables of optimisers and EMA.
#include "dsl/state.h"

#include "dsl/ops_internal.h"

namespace towerjit {

namespace {

constexpr const char* kGlobalStep = "global_step";

// The update op of the graph that assigns `variable_node` last, or -1.
int last_assign_of(const Graph& g, int variable_node) {
  for (auto it = g.update_ops.rbegin(); it != g.update_ops.rend(); ++it) {
    const Node& n = g.node(*it);
    if (n.op == Op::Assign && n.inputs.at(0) == variable_node) return *it;
  }
  return -1;
}

}  // namespace

namespace detail {

Tensor state_variable(Graph& g, const std::string& full_name, const Shape& shape,
                      const Initializer& init, Loc loc) {
  if (const VariableInfo* info = g.find_variable(full_name)) {
    user_check(info->shape == shape && info->dtype == DType::f32, loc)
        << "state variable \"" << full_name << "\" should be f32" << shape.str()
        << " but a variable of that name already exists as " << dtype_name(info->dtype)
        << info->shape.str() << " (created at " << format_location(info->loc)
        << "); rename that variable, the name is reserved for optimiser and EMA state";
    return Tensor(&g, info->node);
  }
  Attrs attrs;
  attrs.name = full_name;
  // `shape` is often another node's (w.shape()), which lives in the graph's node list: make()
  // can grow that list and leave the reference dangling, so keep a copy.
  const Shape own = shape;
  Tensor t = make(g, Op::Variable, {}, own, DType::f32, attrs, loc);
  g.add_variable(VariableInfo{.name = full_name, .shape = own, .dtype = DType::f32,
                              .init = init, .trainable = false, .node = t.id(), .loc = loc});
  return t;
}

Tensor pending_value(Tensor variable) {
  Graph& g = variable.graph();
  const int assign = last_assign_of(g, variable.id());
  return assign < 0 ? variable : Tensor(&g, g.node(assign).inputs.at(1));
}

}  // namespace detail

Tensor global_step(Loc loc) {
  return detail::state_variable(Graph::current(), kGlobalStep, Shape{}, init::zeros(), loc);
}

Tensor increment_global_step(Loc loc) {
  Tensor step = global_step(loc);
  Graph& g = step.graph();
  const int existing = last_assign_of(g, step.id());
  if (existing >= 0) return Tensor(&g, existing);
  return assign(step, add(step, 1.0, loc), loc);
}

}  // namespace towerjit
