// The ModelProto around the graph (runtime/interop/onnx_graph.cpp), encoded by the protobuf
// code that protoc generated from ONNX's own onnx.proto, and written to the file.
#include "runtime/interop/onnx_model.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "dsl/error.h"
#include "onnx/onnx.pb.h"
#include "runtime/interop/onnx_export.h"
#include "runtime/interop/onnx_graph.h"

namespace towerjit::detail {

// Opset 17 (ONNX 1.12, the schema Debian 12 ships) and its IR version, 8: every runtime of the
// last years reads them, and opset 17 has every op the table in onnx_graph.cpp uses.
constexpr int64_t kOpset = 17;
constexpr int64_t kIrVersion = 8;

bool onnx_schema_built() { return true; }

void write_onnx_model(const Graph& graph, Tensor output, const HostVariables& values, const std::string& path,
                      Loc loc) {
  onnx::ModelProto model;
  model.set_ir_version(kIrVersion);
  model.set_producer_name("towerjit");
  model.set_doc_string("the inference program of a towerjit model: batch norm on its moving statistics, no dropout");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  build_onnx_graph(graph, output, values, *model.mutable_graph(), loc);

  std::string bytes;
  internal_check(model.SerializeToString(&bytes)) << "protobuf could not encode the ONNX model";
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  user_check(file.is_open(), loc) << "export_onnx: cannot write \"" << path << "\": " << std::strerror(errno)
                                  << "; give a path in a directory you can write to";
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  user_check(file.good(), loc) << "export_onnx: writing \"" << path << "\" failed after " << bytes.size()
                               << " bytes were encoded; check the free space there";
}

}  // namespace towerjit::detail
