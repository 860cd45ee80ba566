// The graph a tower strategy runs, built from a model's loss by graph transformations: what
// every tower computes on its slice (the loss, the gradients, the model's own update values),
// a collective on every gradient (dsl/collectives.h: all_reduce, keyed
// "tower_gradient/<variable>"), and what is applied to the collectives' results (the
// optimiser's and the EMA's update ops). The runtime cuts the graph at the collectives
// (jit/passes/cut_collectives.h) and maps each to an implementation (an in-process all-reduce
// for CPU towers); runtime/towers/tower_trainer.h compiles and runs the two sides,
// examples/dump_cuda writes their CUDA.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/ema.h"
#include "dsl/optimizers.h"
#include "dsl/tensor.h"

namespace towerjit {

struct TowerProgram {
  // A model's own update op (batch norm's moving average): every tower computes the value
  // from its slice; the runtime combines the towers' values and writes the variable.
  struct ModelUpdate {
    std::string variable;  // e.g. "bn1/moving_mean"
    Tensor value;
  };

  std::vector<Tensor> variables;             // the trainable variables, in creation order
  // The towers' fetches: the loss, then the gradient of each variable (in `variables`' order),
  // then each model update's value, then the rows of each of `sparse`.
  std::vector<Tensor> tower_fetches;
  std::vector<ModelUpdate> model_updates;
  // The collectives: an all_reduce of each gradient (in `variables`' order; for one of `sparse`,
  // the sparse gradient of its rows and values inputs instead), keyed
  // "tower_gradient/<variable>" (`gradient_inputs`: the names the cut apply side reads them
  // under); the update ops (optimiser, then EMA), which read the collectives; the learning
  // rate the apply uses.
  std::vector<Tensor> collectives;
  std::vector<std::string> gradient_inputs;
  // The scalar input the runtime's cut multiplies every collective's result by on the apply
  // side (jit/passes/cut_collectives.h), fed the strategy's factor after the collective.
  static constexpr const char* gradient_scale = "tower_gradient_scale";
  // A gradient's name as the apply's input and its collective's key: this, then the variable's.
  static constexpr std::string_view gradient_prefix = "tower_gradient/";
  std::vector<Tensor> apply_updates;
  Tensor learning_rate;
  // With loss scaling (Optimizer::with_loss_scale), the scale and the count of skipped steps as
  // the apply leaves them; empty tensors without.
  Tensor loss_scale, skipped_steps;

  // A sparse gradient crossing the cut as its rows and values (built with sparse_collectives):
  // the towers fetch the values as the variable's gradient and the rows after the model
  // updates; the strategy concatenates every tower's rows and values in tower order along the
  // batch axis (the values weighted as the reduction weighs a dense gradient, the rows as they
  // are) and feeds them to the apply side as the inputs `gradient_inputs[variable]` (values) and
  // `rows_input`, which the optimiser applies to the touched rows alone.
  struct SparseCollective {
    size_t variable;         // index in `variables`
    std::string rows_input;  // "tower_gradient/<variable>/rows"
    Tensor indices, values;  // the tower's: i32 [B, ...] and f32 [B, ..., D...]
  };
  std::vector<SparseCollective> sparse;
  // Every gradient's dense shape, in `variables`' order (a sparse one's is its table's).
  std::vector<Shape> gradient_shapes;

  Tensor gradient(size_t variable) const { return tower_fetches[1 + variable]; }
};

// Adds the gradients and the apply to `graph` (whose update ops, if any, are the model's own)
// and returns the two sides. Errors (towerjit::Error, at `loc`): a trainable variable the loss
// does not depend on (the towers would never update it), and the optimiser's or EMA's own.
TowerProgram build_tower_program(Graph& graph, Tensor loss, const Optimizer& optimizer,
                                 const std::optional<ExponentialMovingAverage>& ema = std::nullopt,
                                 Loc loc = Loc::current());
// The same, and with `sparse_collectives` every sparse gradient (dsl/sparse_gradients.h) whose
// rows lead with the batch axis, where the optimiser applies sparse gradients, crosses the cut
// as a SparseCollective instead of an all_reduce of its dense [V, D...] value. Other gradients
// (rows not led by the batch, e.g. gather(pos, arange(T)): their count would grow with the
// towers) keep the all_reduce. For strategies that concatenate (runtime/towers/sparse_reduction.h).
TowerProgram build_tower_program(Graph& graph, Tensor loss, const Optimizer& optimizer,
                                 const std::optional<ExponentialMovingAverage>& ema, bool sparse_collectives,
                                 Loc loc = Loc::current());

}  // namespace towerjit
