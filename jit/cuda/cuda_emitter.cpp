// Chooses how each loop kernel's points map onto threads and writes the loops around the
// shared body (kernel_writer.h):
//   - no reduction: a grid-stride loop over the flattened space; when every access is
//     contiguous or constant along a last axis whose extent is a multiple of 4, a float4 path
//     takes 4 points per thread (taken at run time when the pointers are 16-byte aligned);
//   - reductions: jit/cuda/reduction_writer.h (a warp or a block per output and split, or 32
//     outputs per block and split; two passes when the launch splits the reduced points).
// Every reduction order is fixed by the code, the block size and the split (a function of
// the shape and the SM count): bitwise reproducible on a given device.
#include "jit/cuda/cuda_emitter.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "dsl/error.h"
#include "jit/cuda/device_sources.h"
#include "jit/cuda/kernel_writer.h"
#include "jit/cuda/reduction_writer.h"

namespace towerjit::cuda {
namespace {

using detail::KernelWriter;
using detail::output_exprs;
using detail::Point;
using detail::point_of;
using detail::range;
using detail::narrow;
using detail::store_outputs;
using detail::stored_expr;
using detail::widen;
using Scheme = EmittedKernel::Scheme;

constexpr int kBlock = 256;

// A module with bf16 or f16 buffers or values: CUDA's own types and conversions (NVRTC finds the headers
// in the toolkit's include directory, nvrtc_compiler.h); the emulated GPU's host compile has
// its own bit-exact definitions (emulator/kernel/cuda_host.h) and no CUDA headers.
constexpr const char* kHalfFloatIncludes =
    "// bf16 and f16 buffers: __nv_bfloat16 and __half, widened to float on load, rounded to\n"
    "// nearest even on store (__float2bfloat16_rn, __float2half_rn).\n"
    "#ifdef __CUDACC__\n#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n#endif\n"
    "// Four of them in 8 bytes, one load or store for the vector path's quad of points.\n"
    "struct alignas(8) tj_bf16x4 { __nv_bfloat16 x, y, z, w; };\n"
    "struct alignas(8) tj_f16x4 { __half x, y, z, w; };\n\n";
// A quad of `t`'s elements as one aligned load or store: float4 (16 bytes), or four bf16 / f16
// in 8 (the prelude's tj_bf16x4 / tj_f16x4).
std::string quad_type(DType t) {
  if (t == DType::bf16) return "tj_bf16x4";
  if (t == DType::f16) return "tj_f16x4";
  return is_real(t) ? "float4" : "int4";
}

// The accesses a vector path loads or stores as quads, or nothing when the kernel does not
// allow one: each load or store must be contiguous (stride 1) or constant (stride 0) along the
// last axis, whose extent is a multiple of 4, with every other stride and the offset multiples
// of 4, so a quad starting at a multiple of 4 stays in one aligned 16 bytes (8 for 16-bit
// elements).
std::vector<int> vector_accesses(const KernelWriter& w) {
  const kir::Kernel& k = w.kernel();
  const int rank = k.space.rank();
  if (k.reduce != Op::Constant || rank == 0 || k.space[rank - 1] == kBatch || k.space[rank - 1] % 4)
    return {};
  auto quad = [](const kir::Affine& a) { return a.c % 4 == 0 && a.b % 4 == 0; };
  std::vector<int> used;
  for (int e : w.needed(output_exprs(k, 0)))
    if (k.exprs[e].kind == kir::Expr::Kind::load) used.push_back(k.exprs[e].access);
  std::vector<int> vec;
  for (const auto& o : k.outputs) {
    if (!(k.accesses[o.access].strides[rank - 1] == kir::Affine{1, 0})) return {};
    vec.push_back(o.access);
  }
  for (int a : used) {
    const kir::Access& acc = k.accesses[a];
    if (acc.strides[rank - 1] == kir::Affine{}) continue;  // the same value for the 4 lanes
    if (!(acc.strides[rank - 1] == kir::Affine{1, 0})) return {};
    vec.push_back(a);
  }
  std::sort(vec.begin(), vec.end());
  vec.erase(std::unique(vec.begin(), vec.end()), vec.end());
  for (int a : vec) {
    const kir::Access& acc = k.accesses[a];
    if (!quad(acc.offset)) return {};
    for (int axis = 0; axis + 1 < rank; ++axis)
      if (!quad(acc.strides[axis])) return {};
  }
  return vec;
}

void emit_vector_path(std::ostream& out, const KernelWriter& w, const std::vector<int>& vec) {
  const kir::Kernel& k = w.kernel();
  const int rank = k.space.rank();
  std::set<std::string> ptrs;
  for (int a : vec) ptrs.insert(w.buffer(a));
  out << "  // 4 points per thread with 16-byte (16-bit elements: 8-byte) loads and stores when the\n"
         "  // pointers allow it.\n  if (((";
  for (auto it = ptrs.begin(); it != ptrs.end(); ++it)
    out << (it == ptrs.begin() ? "" : " | ") << "(tj_u64)" << *it;
  out << ") & 15) == 0) {\n";
  out << "    for (tj_i64 v = TJ_GLOBAL_THREAD; v < points / 4; v += TJ_GRID_THREADS) {\n";
  w.decompose(out, "      ", "v * 4", range(0, rank), "r");
  Point base = point_of(rank);
  static const char* lane[] = {"x", "y", "z", "w"};
  std::vector<Point> lanes(4, base);
  for (int l = 0; l < 4; ++l) {
    lanes[l].suffix = std::string("_") + lane[l];
    if (l) lanes[l].index[rank - 1] = "(i" + std::to_string(rank - 1) + " + " + std::to_string(l) + ")";
  }
  std::set<int> outs;
  for (const auto& o : k.outputs) outs.insert(o.access);
  for (int a : vec) {
    if (outs.count(a)) continue;
    const DType dt = w.buffer_dtype(a);
    const std::string t = quad_type(dt);
    out << "      const " << t << " a" << a << " = *reinterpret_cast<const " << t << "*>(" << w.buffer(a)
        << " + " << w.address(a, base) << ");\n";
    for (int l = 0; l < 4; ++l) lanes[l].loaded[a] = widen(dt, "a" + std::to_string(a) + "." + lane[l]);  // exact
  }
  for (int l = 0; l < 4; ++l) w.body(out, "      ", lanes[l], output_exprs(k, 0));
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    const int access = k.outputs[i].access;
    const DType dt = w.buffer_dtype(access);
    const std::string t = quad_type(dt);
    out << "      *reinterpret_cast<" << t << "*>(" << w.buffer(access) << " + " << w.address(access, base) << ") = "
        << (is_half_float(dt) ? t + "{" : "make_" + t + "(");
    for (int l = 0; l < 4; ++l) out << (l ? ", " : "") << narrow(dt, w.value(stored_expr(k, i), lanes[l]));
    out << (is_half_float(dt) ? "};\n" : ");\n");
  }
  out << "    }\n    return;\n  }\n";
}

void emit_elementwise(std::ostream& out, const KernelWriter& w, EmittedKernel& info) {
  const kir::Kernel& k = w.kernel();
  const int rank = k.space.rank();
  info.scheme = Scheme::elementwise;
  out << "  const tj_i64 points = " << KernelWriter::affine(info.points) << ";\n";
  const std::vector<int> vec = vector_accesses(w);
  if (!vec.empty()) {
    info.vector_width = 4;
    emit_vector_path(out, w, vec);
  }
  out << "  for (tj_i64 p = TJ_GLOBAL_THREAD; p < points; p += TJ_GRID_THREADS) {\n";
  w.decompose(out, "    ", "p", range(0, rank), "r");
  const Point pt = point_of(rank);
  w.body(out, "    ", pt, output_exprs(k, 0));
  store_outputs(out, w, "    ", pt, 0);
  out << "  }\n";
}

void emit_header(std::ostream& out, const Graph& g, const kir::Kernel& k) {
  out << "// " << k.name << ": loop over " << k.space.str();
  if (k.reduce != Op::Constant) {
    out << ", " << op_name(k.reduce) << " over axes";
    for (int a : k.reduce_axes) out << " " << a;
  }
  out << "\n";
  for (int n : k.nodes) {
    const Node& node = g.node(n);
    out << "//   %" << n << " " << op_name(node.op) << " " << dtype_name(node.dtype) << node.shape.str()
        << " at " << format_location(node);
    if (!node.scope.empty()) out << " in \"" << node.scope << "\"";
    if (node.grad_of >= 0) out << ", gradient of %" << node.grad_of << " " << op_name(g.node(node.grad_of).op);
    out << "\n";
  }
  for (const kir::Kernel& f : k.finishers)
    out << "// finished at each output by " << f.name << " over " << f.space.str() << " (jit/passes/reduction_finishers.h)\n";
}

// A group kernel: a grid-stride loop over the parts' concatenated points; an if-chain on the
// segment starts picks the part, whose body the writer writes as for a kernel of its own, at
// the point's offset into the part. One parameter list: every part's buffers, each once.
std::string emit_group(const Graph& g, const kir::Program& p, const kir::Kernel& group, EmittedKernel& info) {
  std::ostringstream out;
  std::vector<KernelWriter> writers;
  writers.reserve(group.parts.size());
  for (const kir::Kernel& part : group.parts) writers.emplace_back(p, part, info);
  info.symbol = group.name;
  info.block = kBlock;
  info.scheme = Scheme::elementwise;
  const std::vector<kir::Affine> starts = kir::segment_starts(group);
  info.points = info.outputs = starts.back();
  out << "// " << group.name << ": a group of " << group.parts.size() << " parts over one flat range:";
  for (const kir::Kernel& part : group.parts) out << " " << part.name << " " << part.space.str();
  out << "\n";
  for (int n : group.nodes) {
    const Node& node = g.node(n);
    out << "//   %" << n << " " << op_name(node.op) << " " << dtype_name(node.dtype) << node.shape.str()
        << " at " << format_location(node) << "\n";
  }
  out << "extern \"C\" __global__ void __launch_bounds__(" << kBlock << ") " << group.name << "(\n    "
      << writers.front().params() << ") {\n" << KernelWriter::prologue();
  out << "  const tj_i64 points = " << KernelWriter::affine(info.points) << ";\n";
  out << "  for (tj_i64 p = TJ_GLOBAL_THREAD; p < points; p += TJ_GRID_THREADS) {\n";
  for (size_t j = 0; j < writers.size(); ++j) {
    const KernelWriter& w = writers[j];
    const int rank = group.parts[j].space.rank();
    if (j + 1 < writers.size()) out << "    " << (j ? "} else if" : "if") << " (p < " << KernelWriter::affine(starts[j + 1]) << ") {\n";
    else out << "    } else {\n";  // a group has two parts at least
    w.decompose(out, "      ", j ? "p - " + KernelWriter::affine(starts[j]) : "p", range(0, rank), "r");
    const Point pt = point_of(rank);
    w.body(out, "      ", pt, output_exprs(group.parts[j], 0));
    store_outputs(out, w, "      ", pt, 0);
  }
  out << "    }\n  }\n}\n\n";
  return out.str();
}

std::string emit_kernel(const Graph& g, const kir::Program& p, const kir::Kernel& k, EmittedKernel& info) {
  if (!k.parts.empty()) return emit_group(g, p, k, info);
  std::ostringstream out;
  KernelWriter w(p, k, info);
  detail::Finishers finishers;  // their buffers join the parameters before params() is read
  finishers.reserve(k.finishers.size());
  for (const kir::Kernel& f : k.finishers) finishers.emplace_back(p, f, info);
  info.symbol = k.name;
  info.block = kBlock;
  const int rank = k.space.rank();
  info.points = w.count(range(0, rank));
  info.outputs = info.points;
  const bool reduction = k.reduce != Op::Constant;
  if (reduction) {
    detail::plan_reduction(w, info);
    detail::emit_partial_struct(out, w);
  }
  const std::string params = w.params() + (reduction ? detail::reduction_params() : "");
  emit_header(out, g, k);
  out << "extern \"C\" __global__ void __launch_bounds__(" << kBlock << ") " << k.name << "(\n    " << params
      << ") {\n" << KernelWriter::prologue();
  if (reduction) detail::emit_reduction_body(out, w, finishers, info);
  else emit_elementwise(out, w, info);
  out << "}\n\n";
  if (!info.combine_symbol.empty()) detail::emit_combine_kernel(out, w, finishers, info, params);
  return out.str();
}

}  // namespace

CudaModule emit_cuda_module(const Graph& graph, const kir::Program& program, const std::string& module_name) {
  CudaModule m;
  std::ostringstream out;
  out << "// towerjit CUDA module \"" << module_name << "\": " << program.kernels.size()
      << " loop kernels, generated from the kernel IR.\n"
      << "// Each kernel: (buffers..., tj_i64 batch, const tj_u64* step_slot), 256 threads per block (a\n"
      << "// reduction also takes its partials' workspace and the reduced points per split, and has a\n"
      << "// _combine pass); see\n"
      << "// " << module_name << ".index.json for the launch shape and the bytes each kernel moves.\n\n";
  m.prelude = std::string(kDevicePhilox) + "\n" + kDevicePreamble + "\n";
  if (detail::uses_half_floats(program)) m.prelude = std::string(kHalfFloatIncludes) + m.prelude;
  out << m.prelude;
  for (const kir::Kernel& k : program.kernels) {
    EmittedKernel info;
    m.kernel_sources.push_back(emit_kernel(graph, program, k, info));
    out << m.kernel_sources.back();
    m.kernels.push_back(std::move(info));
  }
  m.source = out.str();
  return m;
}

std::string library_module_source() {
  return std::string("// towerjit CUDA library kernels (jit/cuda/device/library_kernels.cu, conv_kernels.cu)\n\n") +
         kDevicePhilox + "\n" + kDevicePreamble + "\n" + kDeviceLibraryParams + "\n" + kDeviceLibraryKernels + "\n" +
         kDeviceConvKernels;
}

const std::vector<std::string>& library_kernel_names() {
  static const std::vector<std::string> names = {
      "tj_conv2d_implicit", "tj_conv2d_grad_input_implicit", "tj_conv2d_grad_filter_implicit",
      "tj_max_pool2d", "tj_max_pool2d_grad", "tj_max_pool2d_bf16", "tj_max_pool2d_grad_bf16",
      "tj_max_pool2d_f16", "tj_max_pool2d_grad_f16", "tj_avg_pool2d",
      "tj_avg_pool2d_grad", "tj_one_hot", "tj_argmax", "tj_pad", "tj_copy_box", "tj_sum_slices",
      "tj_gather", "tj_gather_grad", "tj_combine_rows_links", "tj_combine_rows_sum", "tj_scatter_rows", "tj_scale", "tj_copy_words",
      "tj_attention", "tj_attention_grad_q", "tj_attention_grad_kv",
      "tj_layer_norm", "tj_layer_norm_grad_input", "tj_layer_norm_grad_params_partial", "tj_layer_norm_grad_params_sum",
      "tj_softmax", "tj_softmax_grad", "tj_matmul_epilogue", "tj_conv_epilogue"};
  return names;
}

}  // namespace towerjit::cuda
