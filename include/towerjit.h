// towerjit: the one header a user includes, and the public API: what it includes is what
// towerjit installs (cmake/Install.cmake) and keeps stable within a minor version.
//
//   the DSL         tensors, ops, layers, variables, autodiff, phases, collectives (dsl/)
//   training        Towers, optimisers and schedules, EMA, TowerTrainer, fit() and its hooks
//                   (LogHook, EvalHook, CheckpointHook, HistogramHook), Predictor, checkpoints
//   data            Dataset (MNIST-format files), TensorDataset, BatchPipeline, augment
//   reports         Progress, MetricsWriter (JSON lines), TensorBoardWriter, MetricsTee, SVG
//                   plots of a metrics file
//   compiling       CompileOptions: the compile cache's directory, dumps, the numerics check
//   inspection      dump_cuda of a trainer or of a graph
//   errors          towerjit::Error, Interrupted
//
// Internals (the kernel IR, the buffer plan, the emitters and compilers, the reference
// interpreter, the transports, the CUDA runtime) are not here and not installed: towerjit's
// tests and tools include them by their paths in the repository. docs/architecture.md says
// what this header costs a translation unit.
#pragma once

#include "dsl/autodiff.h"
#include "dsl/collectives.h"
#include "dsl/devices.h"
#include "dsl/ema.h"
#include "dsl/exception.h"
#include "dsl/layers.h"
#include "dsl/ops.h"
#include "dsl/optimizers.h"
#include "dsl/phase.h"
#include "dsl/schedules.h"
#include "dsl/sequence.h"
#include "dsl/state.h"
#include "dsl/towers.h"
#include "dsl/variables.h"
#include "jit/compile_options.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/augment.h"
#include "runtime/data/cast_feeds.h"
#include "runtime/data/batch_pipeline.h"
#include "runtime/data/fashion_mnist.h"
#include "runtime/data/npy.h"
#include "runtime/data/npz.h"
#include "runtime/data/tensor_dataset.h"
#include "runtime/interop/onnx_export.h"
#include "runtime/report/metrics.h"
#include "runtime/report/progress.h"
#include "runtime/report/svg_plot.h"
#include "runtime/report/tensorboard.h"
#include "runtime/interop/safetensors.h"
#include "runtime/towers/dump_programs.h"
#include "runtime/towers/fit.h"
#include "runtime/towers/histogram_hook.h"
#include "runtime/towers/hooks.h"
#include "runtime/towers/predictor.h"
#include "runtime/towers/tower_trainer.h"
