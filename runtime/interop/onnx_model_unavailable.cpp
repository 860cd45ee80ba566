// Built in place of onnx_model.cpp where ONNX's schema (onnx.proto) was not found when towerjit
// was built: export_onnx says what to install.
#include "runtime/interop/onnx_export.h"
#include "runtime/interop/onnx_model.h"

namespace towerjit::detail {

bool onnx_schema_built() { return false; }

void write_onnx_model(const Graph&, Tensor, const HostVariables&, const std::string&, Loc loc) {
  onnx_schema_missing(loc);
}

}  // namespace towerjit::detail
