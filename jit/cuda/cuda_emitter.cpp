// Chooses how each loop kernel's points map onto threads and writes the loops around the
// shared body (kernel_writer.h):
//   - no reduction: a grid-stride loop over the flattened space; when every access is
//     contiguous or constant along a last axis whose extent is a multiple of 4, a float4 path
//     takes 4 points per thread (taken at run time when the pointers are 16-byte aligned);
//   - trailing reduction: a warp (short rows) or a block (long or batch-sized rows) per
//     output, combined with warp shuffles and shared memory;
//   - other reductions: 32 outputs per block, each thread summing one of 8 slices of the
//     reduced points, the slices combined in order through shared memory.
// Every reduction order is fixed by the code and the block size: bitwise reproducible.
#include "jit/cuda/cuda_emitter.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "dsl/error.h"
#include "jit/cuda/device_sources.h"
#include "jit/cuda/kernel_writer.h"

namespace towerjit::cuda {
namespace {

using detail::KernelWriter;
using detail::Point;
using Scheme = EmittedKernel::Scheme;

constexpr int kBlock = 256;
constexpr int kWarpRowLimit = 1024;  // reduced length up to which a warp takes a whole row

std::vector<int> range(int from, int to) {
  std::vector<int> v;
  for (int i = from; i < to; ++i) v.push_back(i);
  return v;
}

Point point_of(int rank) {
  Point pt;
  for (int a = 0; a < rank; ++a) pt.index.push_back("i" + std::to_string(a));
  return pt;
}

std::vector<int> output_exprs(const kir::Kernel& k, size_t first) {
  std::vector<int> roots;
  for (size_t i = first; i < k.outputs.size(); ++i) roots.push_back(k.outputs[i].expr);
  return roots;
}

void store_outputs(std::ostream& out, const KernelWriter& w, const std::string& ind,
                   const Point& pt, size_t first) {
  const kir::Kernel& k = w.kernel();
  for (size_t i = first; i < k.outputs.size(); ++i)
    out << ind << w.buffer(k.outputs[i].access) << "[" << w.address(k.outputs[i].access, pt)
        << "] = " << w.value(k.outputs[i].expr, pt) << ";\n";
}

// The accesses a float4 path loads or stores as vectors, or nothing when the kernel does not
// allow one: each load or store must be contiguous (stride 1) or constant (stride 0) along the
// last axis, whose extent is a multiple of 4, with every other stride and the offset multiples
// of 4, so a quad starting at a multiple of 4 stays in one aligned 16 bytes.
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
  out << "  // 4 points per thread with 16-byte loads and stores when the pointers allow it.\n  if (((";
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
    const std::string t = w.type(w.buffer_dtype(a)) + "4";
    out << "      const " << t << " a" << a << " = *reinterpret_cast<const " << t << "*>(" << w.buffer(a)
        << " + " << w.address(a, base) << ");\n";
    for (int l = 0; l < 4; ++l) lanes[l].loaded[a] = "a" + std::to_string(a) + "." + lane[l];
  }
  for (int l = 0; l < 4; ++l) w.body(out, "      ", lanes[l], output_exprs(k, 0));
  for (const auto& o : k.outputs) {
    const std::string t = w.type(w.buffer_dtype(o.access));
    out << "      *reinterpret_cast<" << t << "4*>(" << w.buffer(o.access) << " + " << w.address(o.access, base)
        << ") = make_" << t << "4(";
    for (int l = 0; l < 4; ++l) out << (l ? ", " : "") << w.value(o.expr, lanes[l]);
    out << ");\n";
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

// Identity and combine of the kernel's reduction, in the accumulator's type.
struct Reduction {
  std::string type, identity, op;
  std::string before = "", after = "";  // around the total: a mean's " / n", a log-sum-exp's result
  int bytes = 4;                        // of the accumulator, for shared memory
  std::string result(const std::string& acc) const { return before + acc + after; }
};

Reduction reduction_of(const KernelWriter& w, int out) {
  const kir::Kernel& k = w.kernel();
  const bool f = k.exprs[k.outputs[out].expr].dtype == DType::f32;
  const Op op = k.outputs[out].reduce;
  Reduction r{w.type(f ? DType::f32 : DType::i32), f ? "0.0f" : "0", "TjSum()"};
  if (op == Op::ReduceMax) r.identity = f ? "(-TJ_INF)" : "TJ_INT_MIN", r.op = "TjMax()";
  if (op == Op::ReduceMean) r.after = " / (float)len";
  if (op == Op::ReduceLogSumExp)
    r = Reduction{"TjLseAcc", "tj_lse_identity()", "TjLse()", "tj_lse_result(", ")", 8};
  return r;
}

// Every reduction of the kernel (sibling reductions share the loop nest), in output order.
std::vector<Reduction> reductions_of(const KernelWriter& w) {
  std::vector<Reduction> rs;
  for (int j = 0; j < w.kernel().reductions(); ++j) rs.push_back(reduction_of(w, j));
  return rs;
}

std::string acc_name(size_t j) { return "acc" + (j ? std::to_string(j) : std::string()); }

// The inner loop of a reduction: the body at each reduced point, side outputs, accumulate.
void emit_accumulate(std::ostream& out, const KernelWriter& w, const std::string& ind,
                     const std::string& from, const std::string& step, const std::vector<int>& reduced,
                     const std::vector<Reduction>& rs) {
  const kir::Kernel& k = w.kernel();
  out << ind << "for (tj_i64 q = " << from << "; q < len; q += " << step << ") {\n";
  w.decompose(out, ind + "  ", "q", reduced, "rq");
  const Point pt = point_of(k.space.rank());
  std::vector<int> roots = output_exprs(k, 0);
  w.body(out, ind + "  ", pt, roots);
  store_outputs(out, w, ind + "  ", pt, rs.size());
  for (size_t j = 0; j < rs.size(); ++j)
    out << ind << "  " << acc_name(j) << " = " << rs[j].op << "(" << acc_name(j) << ", "
        << w.value(k.outputs[j].expr, pt) << ");\n";
  out << ind << "}\n";
}

std::string out_address(const KernelWriter& w, const std::vector<int>& reduced, size_t out) {
  Point pt = point_of(w.kernel().space.rank());
  for (int a : reduced) pt.index[a] = "0";  // the output's strides along them are 0
  return w.address(w.kernel().outputs[out].access, pt);
}

void emit_row_reduction(std::ostream& out, const KernelWriter& w, EmittedKernel& info,
                        const std::vector<int>& kept, const std::vector<int>& reduced) {
  const kir::Kernel& k = w.kernel();
  const std::vector<Reduction> rs = reductions_of(w);
  const kir::Affine len = w.count(reduced);
  const bool warp = len.b == 0 && len.c <= kWarpRowLimit;
  info.scheme = warp ? Scheme::row_per_warp : Scheme::row_per_block;
  out << "  const tj_i64 rows = " << KernelWriter::affine(info.outputs) << ", len = " << KernelWriter::affine(len) << ";\n";
  if (warp) {
    out << "  const int lane = threadIdx.x & 31;\n";
    out << "  for (tj_i64 row = TJ_GLOBAL_THREAD >> 5; row < rows; row += TJ_GRID_THREADS >> 5) {\n";
  } else {
    info.shared_bytes = 0;
    for (size_t j = 0; j < rs.size(); ++j) {
      info.shared_bytes += 32 * rs[j].bytes;
      out << "  __shared__ " << rs[j].type << " smem" << (j ? std::to_string(j) : "") << "[32];\n";
    }
    out << "  for (tj_i64 row = blockIdx.x; row < rows; row += gridDim.x) {\n";
  }
  w.decompose(out, "    ", "row", kept, "ro");
  for (size_t j = 0; j < rs.size(); ++j) out << "    " << rs[j].type << " " << acc_name(j) << " = " << rs[j].identity << ";\n";
  emit_accumulate(out, w, "    ", warp ? "lane" : "threadIdx.x", warp ? "32" : "blockDim.x", reduced, rs);
  for (size_t j = 0; j < rs.size(); ++j) {
    const std::string a = acc_name(j);
    if (warp) out << "    " << a << " = tj_warp_reduce(" << a << ", " << rs[j].op << ");\n";
    else out << "    " << a << " = tj_block_reduce(" << a << ", " << rs[j].op << ", " << rs[j].identity
             << ", smem" << (j ? std::to_string(j) : "") << ");\n";
  }
  for (size_t j = 0; j < rs.size(); ++j)
    out << (warp ? "    if (lane == 0) " : "    if (threadIdx.x == 0) ") << w.buffer(k.outputs[j].access) << "["
        << out_address(w, reduced, j) << "] = " << rs[j].result(acc_name(j)) << ";\n";
  out << "  }\n";
}

void emit_column_reduction(std::ostream& out, const KernelWriter& w, EmittedKernel& info,
                           const std::vector<int>& kept, const std::vector<int>& reduced) {
  const kir::Kernel& k = w.kernel();
  const std::vector<Reduction> rs = reductions_of(w);
  info.scheme = Scheme::column;
  info.shared_bytes = 0;
  out << "  const tj_i64 outputs = " << KernelWriter::affine(info.outputs)
      << ", len = " << KernelWriter::affine(w.count(reduced)) << ";\n";
  for (size_t j = 0; j < rs.size(); ++j) {
    info.shared_bytes += kBlock * rs[j].bytes;
    out << "  __shared__ " << rs[j].type << " part" << (j ? std::to_string(j) : "") << "[" << kBlock
        << "];  // [slice][output]\n";
  }
  out << "  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;\n";
  out << "  for (tj_i64 o0 = (tj_i64)blockIdx.x * 32; o0 < outputs; o0 += (tj_i64)gridDim.x * 32) {\n";
  out << "    const tj_i64 o = o0 + tx;\n";
  for (size_t j = 0; j < rs.size(); ++j) out << "    tj_i64 at" << j << " = 0;\n";
  for (size_t j = 0; j < rs.size(); ++j) out << "    " << rs[j].type << " " << acc_name(j) << " = " << rs[j].identity << ";\n";
  out << "    if (o < outputs) {\n";
  w.decompose(out, "      ", "o", kept, "ro");
  for (size_t j = 0; j < rs.size(); ++j) out << "      at" << j << " = " << out_address(w, reduced, j) << ";\n";
  emit_accumulate(out, w, "      ", "ty", "8", reduced, rs);
  out << "    }\n";
  for (size_t j = 0; j < rs.size(); ++j)
    out << "    part" << (j ? std::to_string(j) : "") << "[threadIdx.x] = " << acc_name(j) << ";\n";
  out << "    __syncthreads();\n";
  out << "    if (ty == 0 && o < outputs) {\n";
  for (size_t j = 0; j < rs.size(); ++j) {
    const std::string a = acc_name(j), part = "part" + (j ? std::to_string(j) : std::string());
    out << "      for (int y = 1; y < 8; ++y) " << a << " = " << rs[j].op << "(" << a << ", " << part << "[y * 32 + tx]);\n";
    out << "      " << w.buffer(k.outputs[j].access) << "[at" << j << "] = " << rs[j].result(a) << ";\n";
  }
  out << "    }\n    __syncthreads();\n  }\n";
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
  info.symbol = k.name;
  info.block = kBlock;
  const int rank = k.space.rank();
  info.points = w.count(range(0, rank));
  info.outputs = info.points;
  emit_header(out, g, k);
  out << "extern \"C\" __global__ void __launch_bounds__(" << kBlock << ") " << k.name << "(\n    "
      << w.params() << ") {\n" << KernelWriter::prologue();
  if (k.reduce == Op::Constant) {
    emit_elementwise(out, w, info);
  } else {
    std::vector<int> kept, reduced = k.reduce_axes;
    std::sort(reduced.begin(), reduced.end());
    for (int a = 0; a < rank; ++a)
      if (!std::binary_search(reduced.begin(), reduced.end(), a)) kept.push_back(a);
    info.outputs = w.count(kept);
    const bool trailing = kept.empty() || reduced.empty() || kept.back() < reduced.front();
    if (trailing) emit_row_reduction(out, w, info, kept, reduced);
    else emit_column_reduction(out, w, info, kept, reduced);
  }
  out << "}\n\n";
  return out.str();
}

}  // namespace

int64_t EmittedKernel::grid_size(int64_t batch, int64_t max_blocks) const {
  const int64_t n = outputs.at(batch), pts = points.at(batch);
  int64_t blocks = 1;
  switch (scheme) {
    case Scheme::elementwise: blocks = (pts / vector_width + block - 1) / block; break;
    case Scheme::row_per_warp: blocks = (n * 32 + block - 1) / block; break;
    case Scheme::row_per_block: blocks = n; break;
    case Scheme::column: blocks = (n + 31) / 32; break;
  }
  return std::clamp<int64_t>(blocks, 1, std::max<int64_t>(1, max_blocks));
}

CudaModule emit_cuda_module(const Graph& graph, const kir::Program& program, const std::string& module_name) {
  CudaModule m;
  std::ostringstream out;
  out << "// towerjit CUDA module \"" << module_name << "\": " << program.kernels.size()
      << " loop kernels, generated from the kernel IR.\n"
      << "// Each kernel: (buffers..., tj_i64 batch, const tj_u64* step_slot), 256 threads per block; see\n"
      << "// " << module_name << ".index.json for the launch shape and the bytes each kernel moves.\n\n"
      << kDevicePhilox << "\n" << kDevicePreamble << "\n";
  for (const kir::Kernel& k : program.kernels) {
    EmittedKernel info;
    out << emit_kernel(graph, program, k, info);
    m.kernels.push_back(std::move(info));
  }
  m.source = out.str();
  return m;
}

std::string library_module_source() {
  return std::string("// towerjit CUDA library kernels (jit/cuda/device/library_kernels.cu)\n\n") +
         kDevicePhilox + "\n" + kDevicePreamble + "\n" + kDeviceLibraryParams + "\n" + kDeviceLibraryKernels;
}

const std::vector<std::string>& library_kernel_names() {
  static const std::vector<std::string> names = {
      "tj_im2col", "tj_col2im", "tj_max_pool2d", "tj_max_pool2d_grad", "tj_avg_pool2d",
      "tj_avg_pool2d_grad", "tj_one_hot", "tj_argmax", "tj_pad", "tj_copy_box", "tj_sum_images"};
  return names;
}

}  // namespace towerjit::cuda
