// Training and inference phases: one model, written once, that behaves as in training in the
// programs that train it and as in inference in those that predict (Keras' `training=None`,
// PyTorch's model.train()/model.eval()). A phase-dependent value is a by_phase node holding
// both; which one a program computes is chosen when the program is compiled:
//   - every program is a training program unless selected otherwise (TowerTrainer's step, a
//     CpuProgram or reference::run on the graph as built);
//   - TowerTrainer's predict() and evaluate() compile the graph selected for inference
//     (jit/passes/select_phase.h does the selection).
// batch_norm and dropout without a `training` argument are built this way (dsl/layers.h).
#pragma once

#include "dsl/tensor.h"

namespace towerjit {

enum class Phase { training, inference };

// `training` in a training program, `inference` in an inference program. The gradient reaches
// `training` only: programs are differentiated as they train. Errors: tensors of different
// graphs, shapes or dtypes.
Tensor by_phase(Tensor training, Tensor inference, Loc loc = Loc::current());

}  // namespace towerjit
