// The shadows read each variable's pending value (the optimiser's assign), because update ops
// all read the values from before the step: reading the variable would average one step late.
#include "dsl/ema.h"

#include "dsl/ops_internal.h"
#include "dsl/state.h"
#include "dsl/variables.h"

namespace towerjit {

std::string ema_name(const std::string& variable) { return variable + "/ema"; }

std::map<std::string, std::string> ema_names(const Graph& graph) {
  std::map<std::string, std::string> out;
  for (const VariableInfo& v : graph.variables()) {
    const VariableInfo* shadow = graph.find_variable(ema_name(v.name));
    // A shadow is a copy of its variable; a user variable that merely ends in "/ema" is not.
    if (shadow && shadow->init.kind == Initializer::Kind::copy && shadow->init.source == v.name)
      out[v.name] = shadow->name;
  }
  return out;
}

std::vector<Tensor> ExponentialMovingAverage::apply(std::vector<Tensor> variables,
                                                    Loc loc) const {
  user_check(decay >= 0 && decay <= 1, loc)
      << "ExponentialMovingAverage: decay is " << decay << " but must be in [0, 1] (e.g. 0.9999)";
  if (variables.empty()) variables = trainable_variables();
  std::vector<Tensor> out;
  if (variables.empty()) return out;
  user_check(variables[0].valid(), loc)
      << "ExponentialMovingAverage: variable 0 is an empty tensor; pass variables of the graph";
  Graph& g = variables[0].graph();
  GraphScope in(g);
  Tensor d = constant(decay, {}, DType::f32, loc);
  if (num_updates) {
    Tensor n = detail::pending_value(global_step(loc));
    d = minimum(d, div(add(1.0, n, loc), add(10.0, n, loc), loc), loc);
  }
  Tensor one_minus_decay = sub(1.0, d, loc);
  for (const Tensor& v : variables) {
    user_check(v.valid() && &v.graph() == &g && v.node().op == Op::Variable &&
                   v.dtype() == DType::f32, loc)
        << "ExponentialMovingAverage: can only average f32 variables of one graph, but got "
        << (v.valid() ? v.describe() : std::string("an empty tensor"))
        << "; pass the model's variables (variable(), trainable_variables())";
    const std::string& name = v.node().attrs.name;
    Tensor shadow =
        detail::state_variable(g, ema_name(name), v.shape(), init::copy_of(name), loc);
    Tensor next = sub(shadow, mul(one_minus_decay, sub(shadow, detail::pending_value(v), loc),
                                  loc), loc);
    out.push_back(assign(shadow, next, loc));
  }
  return out;
}

}  // namespace towerjit
