// towerjit's graph as an ONNX GraphProto, op by op (the table is in onnx_graph.cpp). Built only
// where ONNX's schema was found (runtime/CMakeLists.txt); the protobuf types stay out of this
// header so nothing that includes it needs the generated code.
#pragma once

#include "dsl/graph.h"
#include "dsl/tensor.h"
#include "runtime/host_tensor.h"

namespace onnx {
class GraphProto;
}

namespace towerjit::detail {

// Fills `out` with the nodes computing `output` of `graph` (a graph selected for inference: no
// by_phase node left), the inputs it reads (their batch dimension the dynamic axis "batch"),
// one output "logits", and an initializer for every variable it reads, from `values`. Errors
// (towerjit::Error): an op with no ONNX form, named at the line that built it; a variable
// missing from `values` or held with another shape or dtype (at `loc`).
void build_onnx_graph(const Graph& graph, Tensor output, const HostVariables& values, onnx::GraphProto& out,
                      Loc loc);

}  // namespace towerjit::detail
