// Writing the ONNX file: onnx_model.cpp where ONNX's schema was found when towerjit was built,
// onnx_model_unavailable.cpp where it was not (runtime/CMakeLists.txt).
#pragma once

#include <string>

#include "dsl/graph.h"
#include "dsl/tensor.h"
#include "runtime/host_tensor.h"

namespace towerjit::detail {

// Writes `output` of `graph` (selected for inference) with `values` as an ONNX model at `path`.
// Errors as export_onnx's.
void write_onnx_model(const Graph& graph, Tensor output, const HostVariables& values, const std::string& path,
                      Loc loc);

}  // namespace towerjit::detail
