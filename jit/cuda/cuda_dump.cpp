#include "jit/cuda/cuda_dump.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dsl/error.h"
#include "jit/cuda/kernel_writer.h"
#include "jit/cuda/module_parts.h"
#include "jit/cuda/nvrtc_compiler.h"
#include "jit/dump.h"
#include "jit/passes/pipeline.h"

namespace towerjit::cuda {
namespace {

using nlohmann::json;

const char* scheme_name(EmittedKernel::Scheme s) {
  switch (s) {
    case EmittedKernel::Scheme::elementwise: return "elementwise grid-stride";
    case EmittedKernel::Scheme::row_per_warp: return "one warp per output row and split";
    case EmittedKernel::Scheme::row_per_block: return "one block per output row and split";
    case EmittedKernel::Scheme::column: return "32 outputs per block and split, 8 slices each";
  }
  return "";
}

// The grid as an expression of B: ceil(work / per_block).
std::string grid_text(const EmittedKernel& k) {
  using S = EmittedKernel::Scheme;
  kir::Affine work = k.scheme == S::elementwise ? k.points : k.outputs;
  int64_t per = 1;
  if (k.scheme == S::elementwise) per = int64_t{k.block} * k.vector_width;
  if (k.scheme == S::row_per_warp) per = k.block / 32;
  if (k.scheme == S::column) per = 32;
  const std::string w = detail::KernelWriter::affine(work);
  std::string g;
  if (work.b == 0) g = std::to_string(std::max<int64_t>(1, (work.c + per - 1) / per));
  else g = per == 1 ? w : "ceil(" + w + " / " + std::to_string(per) + ")";
  return k.is_reduction() ? g + " * splits" : g;
}

// A reduction's split at a few batch sizes on the device the dump is for, and on an H200 when
// that is another (an emulated GPU's 4 SMs split less): how many pieces, the blocks of each
// pass, whether the last block folds the partials (one pass) and the partials' bytes
// (EmittedKernel::launch).
json splits_of(const EmittedKernel& k, int sm_count) {
  json on = json::object();
  const std::vector<int64_t> batches = k.points.b == 0 ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 128, 512, 4096};
  for (int sms : {sm_count, kDumpSmCount}) {
    json at = json::object();
    for (int64_t b : batches) {
      const Launch l = k.launch(b, sms);
      at[k.points.b == 0 ? "any B" : "B=" + std::to_string(b)] = {
          {"splits", l.splits}, {"chunk", l.chunk}, {"grid", l.grid}, {"combine_grid", l.combine_grid},
          {"one_pass", l.one_pass}, {"partials_bytes", l.partials_bytes}};
    }
    on[std::to_string(sms) + " SMs"] = at;
  }
  return {{"rule", "EmittedKernel::launch (docs/cuda.md, Reductions)"}, {"combine", k.combine_symbol},
          {"partial_bytes", k.partial_bytes}, {"on", on}};
}

json launch_of(const kir::Program& p, const EmittedKernel& k, int sm_count) {
  json params = json::array();
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const kir::Buffer& b = p.buffers[k.buffers[i]];
    params.push_back(std::string(k.written[i] ? "" : "const ") + detail::KernelWriter::storage_type(b.dtype) +
                     "* b" + std::to_string(k.buffers[i]) + " (" + b.name + ")");
  }
  params.push_back("tj_i64 batch");
  params.push_back("const tj_u64* step_slot");
  json launch = {{"scheme", scheme_name(k.scheme)}, {"block", k.block}, {"grid", grid_text(k)},
                 {"shared_bytes", k.shared_bytes}, {"vector_width", k.vector_width}};
  if (k.is_reduction()) {
    params.push_back("void* tj_partials");
    params.push_back("tj_i64 chunk");
    params.push_back("unsigned int* tj_ticket");
    launch["split"] = splits_of(k, sm_count);
  }
  launch["params"] = params;
  return launch;
}

// A convolution pass's routine: cuDNN's, towerjit's implicit GEMM (`own`), or either in f32.
std::string conv_routine(bool cudnn, DType output, const std::string& library, const std::string& own) {
  if (!cudnn) return own;
  return output == DType::f32 ? library + " or " + own + ", the faster for the shape" : library;
}

}  // namespace

std::string library_routine(const kir::LibraryCall& c, bool cudnn, DType output) {
  std::string half;  // the 16-bit max pools' suffix
  if (is_half_float(output)) half.append("_").append(dtype_name(output));
  switch (c.op) {
    case Op::MatMul:  // cuBLAS's sgemm where cuBLASLt does not load (docs/cuda.md)
      if (c.epilogue == kir::Epilogue::bias) return "cublasLtMatmul, CUBLASLT_EPILOGUE_BIAS";
      if (c.epilogue == kir::Epilogue::bias_relu) return "cublasLtMatmul, CUBLASLT_EPILOGUE_RELU_BIAS";
      return "cublasLtMatmul";
    // With cuDNN, an f32 pass runs on whichever of the two was faster for its shape, chosen when
    // the batch is bound (runtime/cuda/conv_choice.h), after the dump is written.
    case Op::Conv2D:  // an epilogue: after cuDNN a kernel of its own, in the implicit GEMM as it stores
      if (c.epilogue != kir::Epilogue::none)
        return conv_routine(cudnn, output, "cudnnConvolutionForward + tj_conv_epilogue",
                            std::string("tj_conv2d_implicit (epilogue ") + kir::epilogue_name(c.epilogue) + ")");
      return conv_routine(cudnn, output, "cudnnConvolutionForward", "tj_conv2d_implicit");
    case Op::Conv2DGradInput:
      return conv_routine(cudnn, output, "cudnnConvolutionBackwardData", "tj_conv2d_grad_input_implicit");
    case Op::Conv2DGradFilter:
      return conv_routine(cudnn, output, "cudnnConvolutionBackwardFilter",
                          "tj_conv2d_grad_filter_implicit (+ tj_sum_slices)");
    case Op::MaxPool2D: return "tj_max_pool2d" + half;
    case Op::MaxPool2DGrad: return "tj_max_pool2d_grad" + half;
    case Op::AvgPool2D: return "tj_avg_pool2d";
    case Op::AvgPool2DGrad: return "tj_avg_pool2d_grad";
    case Op::OneHot: return "tj_one_hot";
    case Op::ArgMax: return "tj_argmax";
    case Op::Gather: return "tj_gather";
    case Op::GatherGrad: return "cuMemsetD32Async + tj_gather_grad";
    case Op::CombineRows: return "tj_combine_rows_links + tj_combine_rows_sum";
    case Op::ScatterRows: return "cuMemcpyDtoDAsync (unless in place) + tj_scatter_rows";
    case Op::Attention: return "tj_attention";
    case Op::AttentionGradQ: return "tj_attention_grad_q";
    case Op::AttentionGradKV: return "tj_attention_grad_kv";
    case Op::LayerNorm: return "tj_layer_norm";
    case Op::LayerNormGradInput: return "tj_layer_norm_grad_input";
    case Op::LayerNormGradParams: return "tj_layer_norm_grad_params_partial + tj_layer_norm_grad_params_sum";
    case Op::Softmax: return "tj_softmax";
    case Op::SoftmaxGrad: return "tj_softmax_grad";
    case Op::Pad: return "tj_pad";
    case Op::Concat: return "tj_copy_box per part";
    default: return "none";
  }
}

std::string cuda_index_json(const Graph& g, const kir::Program& p, const CudaModule& m,
                            const std::string& module_name, bool cudnn, int sm_count) {
  json index = json::parse(dump_index_json(g, p, module_name));
  internal_check(index["steps"].size() == p.steps.size()) << "index and program disagree";
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const kir::Step& s = p.steps[i];
    if (s.kind == kir::Step::Kind::kernel) index["steps"][i]["launch"] = launch_of(p, m.kernels[s.index], sm_count);
    if (s.kind == kir::Step::Kind::library) index["steps"][i]["cuda"] = library_routine(p.calls[s.index], cudnn, p.buffers[p.calls[s.index].output].dtype);
    if (s.kind == kir::Step::Kind::copy) index["steps"][i]["cuda"] = "cuMemcpyDtoDAsync";
  }
  index["backend"] = "cuda";
  return index.dump(1);
}

std::vector<std::string> write_cuda_dump(const std::string& dir, const Graph& g, const kir::Program& p,
                                         const CudaModule& m, const std::string& module_name,
                                         const std::string& ptx, bool cudnn, int sm_count) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::vector<std::pair<std::string, std::string>> files = {
      {".cu", m.source}, {".index.json", cuda_index_json(g, p, m, module_name, cudnn, sm_count) + "\n"}, {".kir", kir::to_string(p)}};
  if (!ptx.empty()) files.push_back({".ptx", ptx});
  std::vector<std::string> paths;
  for (const auto& [ext, text] : files) {
    const std::string path = dir + "/" + module_name + ext;
    std::ofstream out(path, std::ios::binary);
    out << text;
    user_check(out.good(), std::source_location::current())
        << "cannot write \"" << path << "\"; point the dump at a writable directory";
    paths.push_back(path);
  }
  return paths;
}

std::vector<std::string> dump_cuda_of(const std::string& dir, const Graph& g, const kir::Program& p,
                                      const std::string& stem, const std::string& arch) {
  const CudaModule module = emit_cuda_module(g, p, stem);
  std::string ptx;
  if (!p.kernels.empty() && nvrtc_available()) {
    try {
      ptx = compile_cuda_module(module, stem, resolve_arch(arch)).ptx();
    } catch (const Error& e) {
      std::fprintf(stderr, "towerjit: dump of \"%s\": no PTX, NVRTC failed: %s\n", stem.c_str(), e.what());
    }
  }
  return write_cuda_dump(dir, g, p, module, stem, ptx);
}

}  // namespace towerjit::cuda

namespace towerjit {

std::vector<std::string> dump_cuda(const Graph& graph, const std::vector<Tensor>& fetches, const std::string& dir,
                                   const std::string& name, const std::vector<Tensor>& update_ops) {
  const LoweredProgram lowered = lower_graph_for_gpu(graph, node_ids(graph, fetches), node_ids(graph, update_ops));
  return cuda::dump_cuda_of(dir, lowered.graph, lowered.program, name);
}

}  // namespace towerjit
