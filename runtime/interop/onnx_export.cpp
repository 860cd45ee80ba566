// export_onnx: which graph and which values are written (runtime/interop/onnx_export.h); the
// writing itself is onnx_model.cpp's.
#include "runtime/interop/onnx_export.h"

#include <cstdlib>

#include "dsl/ema.h"
#include "dsl/error.h"
#include "jit/passes/select_phase.h"
#include "runtime/interop/onnx_model.h"
#include "runtime/towers/tower_trainer.h"

namespace towerjit {

void export_onnx(TowerTrainer& trainer, const std::string& path, OnnxExportOptions options, Loc loc) {
  const Tensor logits = trainer.inference_logits();
  user_check(logits.valid(), loc) << "export_onnx: the trainer was built without the model's output; pass it as "
                                  << "TowerTrainerOptions::logits (e.g. {.logits = logits})";
  export_onnx(logits.graph(), logits, trainer.variables(), path, options, loc);
}

void export_onnx(const Graph& graph, Tensor output, const HostVariables& values, const std::string& path,
                 OnnxExportOptions options, Loc loc) {
  user_check(output.valid() && &output.graph() == &graph, loc)
      << "export_onnx: the output tensor " << (output.valid() ? "belongs to another graph" : "is empty")
      << "; pass the model's output tensor of this graph";
  user_check(!path.empty(), loc) << "export_onnx: the path is empty; give a file, e.g. \"model.onnx\"";
  if (!detail::onnx_schema_built()) detail::onnx_schema_missing(loc);
  user_check(!options.ema_weights || !ema_names(graph).empty(), loc)
      << "export_onnx with EMA weights: the model keeps no moving averages; train with "
      << "TowerTrainerOptions::ema (--ema in the examples), or export the trained weights";
  Rewritten inference = select_phase(graph, Phase::inference);
  const Tensor out = remap_tensors(inference, {output})[0];
  detail::write_onnx_model(inference.graph, out, options.ema_weights ? with_ema_weights(values, graph) : values,
                           path, loc);
}

namespace detail {

void onnx_schema_missing(Loc loc) {
  user_check(false, loc) << "export_onnx: this towerjit was built without ONNX's schema (onnx.proto), which "
                         << "writing the file needs; install Debian's libonnx-dev (scripts/install-deps.sh does) "
                         << "or PyPI's onnx, then configure and build towerjit again";
  std::abort();  // not reached: user_check(false) throws
}

}  // namespace detail
}  // namespace towerjit
