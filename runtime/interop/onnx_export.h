// The inference program as an ONNX model, for ONNX Runtime, TensorRT and the other runtimes
// that read the format (docs/interop.md#onnx):
//
//   tj::export_onnx(trainer, "model.onnx");
//
// What is written is the graph predict() compiles: the model's output in the graph selected
// for inference (jit/passes/select_phase.h: batch norm on its moving statistics, no dropout),
// op by op (runtime/interop/onnx_graph.cpp has the table), in ONNX opset 17 (IR version 8). The
// model's inputs keep their names and dtypes; their batch dimension B is the dynamic axis
// "batch"; the output is "logits". Every variable it reads is an initializer holding its
// trained value, named as the variable ("fc1/kernel"), in towerjit's layouts (ONNX's MatMul and
// Conv take them as they are: [in, out] and [O, C, KH, KW]).
//
// The file is encoded by protobuf from ONNX's own schema (onnx.proto, from Debian's
// libonnx-dev or PyPI's onnx), compiled when towerjit is built; a build that did not find the
// schema raises an error saying what to install.
#pragma once

#include <string>

#include "dsl/tensor.h"
#include "runtime/host_tensor.h"

namespace towerjit {

class Graph;
class TowerTrainer;

struct OnnxExportOptions {
  // The EMA shadows in place of the trained variables, as trainer.predict(inputs, true).
  bool ema_weights = false;
};

// Writes `trainer`'s model (TowerTrainerOptions::logits) to `path`. Errors (towerjit::Error at
// `loc`): a trainer without `logits`, EMA weights from a trainer without EMA, an op with no
// ONNX form (named, at the model's line that built it), a file that cannot be written, a build
// without ONNX's schema.
void export_onnx(TowerTrainer& trainer, const std::string& path, OnnxExportOptions options = {},
                 Loc loc = Loc::current());

// The same for `output` of any graph (selected for inference here) with the variables'
// values in `values` (e.g. trainer.variables(), or load_variables() of a checkpoint). Errors
// as above, and a variable the output reads that `values` lacks or holds with another shape.
void export_onnx(const Graph& graph, Tensor output, const HostVariables& values, const std::string& path,
                 OnnxExportOptions options = {}, Loc loc = Loc::current());

namespace detail {
// Whether this build compiled ONNX's schema; export_onnx needs it.
bool onnx_schema_built();
// The error export_onnx raises where onnx_schema_built() is false.
[[noreturn]] void onnx_schema_missing(Loc loc);
}  // namespace detail

}  // namespace towerjit
