// The graph work of a tower trainer, as one list (like jit/passes/pipeline.cpp): the model's
// graph in, every program the towers and the strategies run out.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dsl/tower_program.h"
#include "jit/passes/rewrite.h"
#include "runtime/cpu/cpu_program.h"
#include "runtime/device_program.h"
#include "runtime/thread_pool.h"
#include "runtime/towers/tower_trainer.h"

namespace towerjit::detail {

struct CompiledTowers {
  // Per tower (run() is not reentrant): the forward and backward on a slice, fetching the loss,
  // every gradient, then every model update's new value (TowerOutputs names them).
  std::vector<std::unique_ptr<DeviceProgram>> tower_step;
  // Per tower, when TowerTrainerOptions::logits is given: the logits in inference.
  std::vector<std::unique_ptr<DeviceProgram>> predict;
  // The graph predict was compiled from (selected for inference) and the logits in it, for
  // exporters (runtime/interop/onnx_export.h). Held by pointer: the tensor refers to its graph.
  std::unique_ptr<Rewritten> inference;
  Tensor inference_logits;
  // The apply side: the graph cut at the collectives, whose results it reads as inputs (the
  // reduced gradients, `gradient_inputs`, scaled by TowerProgram::gradient_scale); it fetches
  // the learning rate, then with loss scaling the scale and the skipped steps after the apply
  // (TowerState::applied reads them). Held by pointer: the tensors below refer to its graph.
  std::unique_ptr<Rewritten> apply_side;
  std::vector<Tensor> apply_fetches;
  std::vector<Tensor> apply_updates;
  std::vector<std::string> gradient_inputs;  // "tower_gradient/<variable>", in fetch order
  std::vector<Shape> gradient_shapes;  // dense (a sparse gradient's: its table's)
  // The gradients that cross as rows and values (TowerProgram::SparseCollective), in order:
  // the towers fetch each one's rows after the model updates (TowerOutputs::rows).
  struct Sparse {
    size_t variable;
    std::string rows_input;
    bool rows_only;  // the apply changes only the gradient's rows (sparse_apply_changes_only_its_rows)
  };
  std::vector<Sparse> sparse;
  bool is_sparse(size_t variable) const { return sparse_of(variable) >= 0; }
  int sparse_of(size_t variable) const;  // the gradient's index in `sparse`, or -1 (dense)
  std::vector<TowerProgram::ModelUpdate> model_updates;  // in fetch order, after the gradients
  std::map<std::string, std::string> ema_shadows;         // variable -> its EMA shadow
  bool has_ema = false;
  HostVariables initial;  // every variable's first value (TowerTrainerOptions::seed)
  std::vector<std::string> variable_order;  // every variable's name, in creation order

  // A new CPU apply program (one per copy of the variables a strategy keeps in host memory).
  std::unique_ptr<CpuProgram> make_apply() const;
};

// Builds the training graph (gradients, optimiser, EMA), compiles the towers' step and predict
// programs on their devices (`pools[t]`: CPU tower t's threads, or null) and cuts the apply
// side. Sparse gradients cross as rows and values (build_tower_program's sparse collectives),
// on CPU and GPU towers alike: every strategy takes them so (the sync ones concatenate the
// towers', runtime/towers/sparse_reduction.h; the async ones apply each tower's as it comes).
// Errors: those of build_tower_program, a GPU the machine lacks, logits of another graph.
CompiledTowers compile_towers(Graph& graph, Tensor loss, const Towers& towers, const Optimizer& optimizer,
                              const TowerTrainerOptions& options, const std::vector<ThreadPool*>& pools, Loc loc);

}  // namespace towerjit::detail
