#include "runtime/towers/compile_towers.h"

#include "dsl/error.h"
#include "dsl/optimizers_sparse.h"
#include "jit/passes/cut_collectives.h"
#include "jit/passes/select_phase.h"
#include "jit/reference/interpreter.h"

namespace towerjit::detail {
namespace {

HostTensor to_host(const reference::Array& a) {
  HostTensor t(a.shape, a.dtype);
  for (int64_t i = 0; i < a.size(); ++i) set_value(t, i, a[i]);  // bf16 / f16 rounded once
  return t;
}

}  // namespace

std::unique_ptr<CpuProgram> CompiledTowers::make_apply() const {
  return std::make_unique<CpuProgram>(apply_side->graph, apply_fetches, apply_updates, nullptr, "apply");
}

int CompiledTowers::sparse_of(size_t variable) const {
  for (size_t k = 0; k < sparse.size(); ++k)
    if (sparse[k].variable == variable) return static_cast<int>(k);
  return -1;
}

CompiledTowers compile_towers(Graph& graph, Tensor loss, const Towers& towers, const Optimizer& optimizer,
                              const TowerTrainerOptions& options, const std::vector<ThreadPool*>& pools, Loc loc) {
  CompiledTowers c;
  // 1. The training graph: gradients, their collectives, the optimiser's and the EMA's updates;
  // CPU and GPU towers alike fetch a sparse gradient's rows and values, not its dense value.
  const TowerProgram program = build_tower_program(graph, loss, optimizer, options.ema, /*sparse=*/true, loc);
  c.model_updates = program.model_updates;
  c.gradient_inputs = program.gradient_inputs;
  c.gradient_shapes = program.gradient_shapes;
  for (const TowerProgram::SparseCollective& s : program.sparse)
    c.sparse.push_back({s.variable, s.rows_input, sparse_apply_changes_only_its_rows(optimizer)});
  // 2. Every tower's step, for any slice size (the batch is symbolic), on the tower's device.
  for (int t = 0; t < towers.size(); ++t)
    c.tower_step.push_back(
        DeviceProgram::compile(graph, program.tower_fetches, towers.devices()[t], pools[t], "tower_step", loc));
  // 3. Predict, in inference: batch norm on its moving statistics, no dropout (dsl/phase.h).
  if (options.logits.valid()) {
    user_check(&options.logits.graph() == &graph, loc)
        << "TowerTrainerOptions::logits belongs to another graph; pass the model's output tensor";
    c.inference = std::make_unique<Rewritten>(select_phase(graph, Phase::inference));
    const std::vector<Tensor> logits = remap_tensors(*c.inference, {options.logits});
    c.inference_logits = logits[0];
    for (int t = 0; t < towers.size(); ++t)
      c.predict.push_back(
          DeviceProgram::compile(c.inference->graph, logits, towers.devices()[t], pools[t], "predict", loc));
  }
  // 4. The apply side, cut at the collectives; each strategy compiles it where its variables are.
  c.apply_side = std::make_unique<Rewritten>(cut_at_collectives(graph, TowerProgram::gradient_scale));
  // The learning rate, then with loss scaling the scale and the skipped steps (TowerState::applied).
  std::vector<Tensor> apply_fetches = {program.learning_rate};
  if (program.loss_scale.valid()) apply_fetches.insert(apply_fetches.end(), {program.loss_scale, program.skipped_steps});
  c.apply_fetches = remap_tensors(*c.apply_side, apply_fetches);
  c.apply_updates = remap_tensors(*c.apply_side, program.apply_updates);
  // 5. The variables' first values, and which are EMA shadows.
  c.ema_shadows = ema_names(graph);
  c.has_ema = options.ema.has_value();
  for (auto& [name, value] : reference::initialize_variables(graph, options.seed)) c.initial[name] = to_host(value);
  for (const VariableInfo& v : graph.variables()) c.variable_order.push_back(v.name);
  return c;
}

}  // namespace towerjit::detail
