// Reduction kernels, written to be read: every order of summation is spelled out by the loops
// and by comments in the generated code. The split (how many pieces, of how many points) is
// the host's choice at launch (EmittedKernel::launch, a function of the shape and the SM
// count); the kernel reads it from `chunk`, so one kernel text serves every batch and device.
#include "jit/cuda/reduction_writer.h"

#include <algorithm>

#include "dsl/error.h"

namespace towerjit::cuda::detail {
namespace {

using Scheme = EmittedKernel::Scheme;

constexpr int kWarpRowLimit = 1024;  // reduced length up to which a warp takes a whole row
constexpr int kColumnSlices = 8;     // column scheme: 256 threads = 32 outputs x 8 slices

// Identity and combine of one reduction, in the accumulator's type.
struct Reduction {
  std::string type, identity, op;
  std::string before = "", after = "";  // around the total: a mean's " / n", a log-sum-exp's result
  int bytes = 4;                        // of the accumulator
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
std::string nth(const std::string& base, size_t j) { return base + (j ? std::to_string(j) : std::string()); }
std::string partial_type(const KernelWriter& w) { return w.kernel().name + "_partial"; }

struct Axes {
  std::vector<int> kept, reduced;
};

Axes axes_of(const kir::Kernel& k) {
  Axes a;
  a.reduced = k.reduce_axes;
  std::sort(a.reduced.begin(), a.reduced.end());
  for (int i = 0; i < k.space.rank(); ++i)
    if (!std::binary_search(a.reduced.begin(), a.reduced.end(), i)) a.kept.push_back(i);
  return a;
}

// The output's element offset once the kept axes are decomposed (its strides along the
// reduced axes are 0).
std::string out_address(const KernelWriter& w, const std::vector<int>& reduced, size_t out) {
  Point pt = point_of(w.kernel().space.rank());
  for (int a : reduced) pt.index[a] = "0";
  return w.address(w.kernel().outputs[out].access, pt);
}

void declare_accumulators(std::ostream& out, const std::string& ind, const std::vector<Reduction>& rs) {
  for (size_t j = 0; j < rs.size(); ++j) out << ind << rs[j].type << " " << acc_name(j) << " = " << rs[j].identity << ";\n";
}

// The inner loop: the body at each reduced point q in [from, end) by `step`, side outputs
// stored there (each point is visited once, by one split), every reduction accumulated.
void emit_accumulate(std::ostream& out, const KernelWriter& w, const std::string& ind, const std::string& from,
                     const std::string& step, const std::vector<int>& reduced, const std::vector<Reduction>& rs) {
  const kir::Kernel& k = w.kernel();
  out << ind << "for (tj_i64 q = " << from << "; q < q1; q += " << step << ") {\n";
  w.decompose(out, ind + "  ", "q", reduced, "rq");
  const Point pt = point_of(k.space.rank());
  w.body(out, ind + "  ", pt, output_exprs(k, 0));
  store_outputs(out, w, ind + "  ", pt, rs.size());
  for (size_t j = 0; j < rs.size(); ++j)
    out << ind << "  " << acc_name(j) << " = " << rs[j].op << "(" << acc_name(j) << ", " << w.value(k.outputs[j].expr, pt)
        << ");\n";
  out << ind << "}\n";
}

// How many pieces the host cut the reduced points into, and where a piece's partials go.
void emit_split_prologue(std::ostream& out, const KernelWriter& w) {
  out << "  // The reduced points [0, len) of each output run in `splits` pieces of `chunk` consecutive\n"
         "  // points (the host's choice: EmittedKernel::launch). One piece: this kernel stores the\n"
         "  // results. Several: it writes each piece's partial to tj_partials[split][output], and\n"
         "  // "
      << w.kernel().name << "_combine folds them in split order.\n";
  out << "  const tj_i64 splits = len > chunk ? (len + chunk - 1) / chunk : 1;\n";
  out << "  " << partial_type(w) << "* const partials = (" << partial_type(w) << "*)tj_partials;\n";
}

void emit_piece_range(std::ostream& out, const std::string& ind) {
  out << ind << "const tj_i64 q0 = split * chunk, q1 = q0 + chunk < len ? q0 + chunk : len;\n";
}

// The finishers at output `flat` (jit/passes/reduction_finishers.h), once the results there are
// stored: each at the point of its loop whose row-major index is `flat`, in a scope of its own
// (its indices and values have names of their own).
void emit_finishers(std::ostream& out, const Finishers& fs, const std::string& ind, const std::string& flat) {
  for (const KernelWriter& f : fs) {
    const kir::Kernel& k = f.kernel();
    const int rank = k.space.rank();
    out << ind << "{  // " << k.name << " at this output\n";
    f.decompose(out, ind + "  ", flat, range(0, rank), "rf");
    const Point pt = point_of(rank);
    f.body(out, ind + "  ", pt, output_exprs(k, 0));
    store_outputs(out, f, ind + "  ", pt, 0);
    out << ind << "}\n";
  }
}

// The unit's results (the thread holding them): stored, and finished, when there is one split,
// else its partials at [split][output].
void emit_finish(std::ostream& out, const KernelWriter& w, const Finishers& fs, const std::string& ind,
                 const std::string& output, const std::string& outputs, const std::vector<int>& reduced,
                 const std::vector<Reduction>& rs) {
  const kir::Kernel& k = w.kernel();
  out << ind << "if (splits == 1) {\n";
  for (size_t j = 0; j < rs.size(); ++j)
    out << ind << "  " << w.buffer(k.outputs[j].access) << "[" << out_address(w, reduced, j)
        << "] = " << rs[j].result(acc_name(j)) << ";\n";
  emit_finishers(out, fs, ind + "  ", output);
  out << ind << "} else {\n";
  for (size_t j = 0; j < rs.size(); ++j)
    out << ind << "  partials[split * " << outputs << " + " << output << "]." << acc_name(j) << " = " << acc_name(j)
        << ";\n";
  out << ind << "}\n";
}

// Folds output o's partials (o and `outputs` in scope, `lane` the thread's lane of its warp):
// lane l takes pieces l, l + 32, ... in order, then the warp's shuffle tree, and lane 0 applies
// the result and stores it. The combine kernel and the one-pass tail fold alike, so both give
// the same bits. `work`: the macro that counts a partial read.
void emit_fold_partials(std::ostream& out, const KernelWriter& w, const Finishers& fs, const std::string& ind,
                        const std::string& outputs, const char* work, const Axes& ax, const std::vector<Reduction>& rs) {
  const kir::Kernel& k = w.kernel();
  declare_accumulators(out, ind, rs);
  out << ind << "for (tj_i64 s = lane; s < splits; s += 32) {\n";
  out << ind << "  " << work << "(1);\n";
  out << ind << "  const " << partial_type(w) << "* const p = &partials[s * " << outputs << " + o];\n";
  for (size_t j = 0; j < rs.size(); ++j)
    out << ind << "  " << acc_name(j) << " = " << rs[j].op << "(" << acc_name(j) << ", tj_load_cg(&p->" << acc_name(j)
        << "));\n";
  out << ind << "}\n";
  for (size_t j = 0; j < rs.size(); ++j)
    out << ind << acc_name(j) << " = tj_warp_reduce(" << acc_name(j) << ", " << rs[j].op << ");\n";
  out << ind << "if (lane == 0) {\n";
  w.decompose(out, ind + "  ", "o", ax.kept, "ro");
  for (size_t j = 0; j < rs.size(); ++j)
    out << ind << "  " << w.buffer(k.outputs[j].access) << "[" << out_address(w, ax.reduced, j)
        << "] = " << rs[j].result(acc_name(j)) << ";\n";
  emit_finishers(out, fs, ind + "  ", "o");
  out << ind << "}\n";
}

// The one-pass form (EmittedKernel::launch's `one_pass`: the host passes tj_ticket): after its
// units, each block makes its partials visible and takes a ticket; the block that takes the
// last one, having seen every other block's partials, folds every output's as the combine
// kernel would and puts the ticket back to 0 for the next launch. The ticket picks a block,
// never an order: the sums are the combine kernel's, bit for bit.
void emit_one_pass_tail(std::ostream& out, const KernelWriter& w, const Finishers& fs, const std::string& outputs,
                        const Axes& ax, const std::vector<Reduction>& rs) {
  out << "  // One pass: the last block to finish folds every output's partials in split order.\n";
  out << "  if (splits > 1 && tj_ticket) {\n";
  out << "    __shared__ int tj_last[1];\n";
  out << "    __threadfence();  // this block's partials, visible before its ticket\n";
  out << "    __syncthreads();\n";
  out << "    if (threadIdx.x == 0) tj_last[0] = atomicAdd(tj_ticket, 1u) == gridDim.x - 1;\n";
  out << "    __syncthreads();\n";
  out << "    if (tj_last[0]) {\n";
  out << "      __threadfence();  // every other block's partials, seen after its ticket\n";
  out << "      const int lane = threadIdx.x & 31;\n";
  out << "      for (tj_i64 o = threadIdx.x >> 5; o < " << outputs << "; o += blockDim.x >> 5) {\n";
  emit_fold_partials(out, w, fs, "        ", outputs, "TJ_TAIL_WORK", ax, rs);
  out << "      }\n";
  out << "      if (threadIdx.x == 0) *tj_ticket = 0;  // for the next launch (a graph replays the same word)\n";
  out << "    }\n  }\n";
}

void emit_row_body(std::ostream& out, const KernelWriter& w, const Finishers& fs, const EmittedKernel& info,
                   const Axes& ax) {
  const std::vector<Reduction> rs = reductions_of(w);
  const bool warp = info.scheme == Scheme::row_per_warp;
  out << "  const tj_i64 rows = " << KernelWriter::affine(info.outputs) << ", len = " << KernelWriter::affine(info.reduced)
      << ";\n";
  emit_split_prologue(out, w);
  if (warp) {
    out << "  const int lane = threadIdx.x & 31;\n";
    out << "  // Unit u, one warp: output row u % rows, piece u / rows. Lane l sums the piece's points\n"
           "  // l, l + 32, ... in order; the warp's shuffle tree (tj_warp_reduce) then folds the lanes.\n";
    out << "  for (tj_i64 u = TJ_GLOBAL_THREAD >> 5; u < rows * splits; u += TJ_GRID_THREADS >> 5) {\n";
  } else {
    for (size_t j = 0; j < rs.size(); ++j) out << "  __shared__ " << rs[j].type << " " << nth("smem", j) << "[32];\n";
    out << "  // Unit u, one block: output row u % rows, piece u / rows. Thread t sums the piece's points\n"
           "  // t, t + 256, ... in order; tj_block_reduce then folds each warp, then the warps in order.\n";
    out << "  for (tj_i64 u = blockIdx.x; u < rows * splits; u += gridDim.x) {\n";
  }
  out << "    const tj_i64 row = u % rows, split = u / rows;\n";
  emit_piece_range(out, "    ");
  w.decompose(out, "    ", "row", ax.kept, "ro");
  declare_accumulators(out, "    ", rs);
  emit_accumulate(out, w, "    ", warp ? "q0 + lane" : "q0 + threadIdx.x", warp ? "32" : "blockDim.x", ax.reduced, rs);
  for (size_t j = 0; j < rs.size(); ++j) {
    const std::string a = acc_name(j);
    if (warp) out << "    " << a << " = tj_warp_reduce(" << a << ", " << rs[j].op << ");\n";
    else out << "    " << a << " = tj_block_reduce(" << a << ", " << rs[j].op << ", " << rs[j].identity << ", " << nth("smem", j) << ");\n";
  }
  out << (warp ? "    if (lane == 0) {\n" : "    if (threadIdx.x == 0) {\n");
  emit_finish(out, w, fs, "      ", "row", "rows", ax.reduced, rs);
  out << "    }\n  }\n";
  emit_one_pass_tail(out, w, fs, "rows", ax, rs);
}

void emit_column_body(std::ostream& out, const KernelWriter& w, const Finishers& fs, const EmittedKernel& info,
                      const Axes& ax) {
  const std::vector<Reduction> rs = reductions_of(w);
  const int block = info.block;
  out << "  const tj_i64 outputs = " << KernelWriter::affine(info.outputs) << ", len = " << KernelWriter::affine(info.reduced)
      << ";\n";
  emit_split_prologue(out, w);
  for (size_t j = 0; j < rs.size(); ++j)
    out << "  __shared__ " << rs[j].type << " " << nth("part", j) << "[" << block << "];  // [slice][output]\n";
  out << "  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;\n";
  out << "  const tj_i64 tiles = (outputs + 31) / 32;\n";
  out << "  // Unit u, one block: outputs 32 * (u % tiles) + tx, piece u / tiles. Slice ty sums the\n"
         "  // piece's points ty, ty + 8, ... in order; slices 0..7 are then folded in order.\n";
  out << "  for (tj_i64 u = blockIdx.x; u < tiles * splits; u += gridDim.x) {\n";
  out << "    const tj_i64 o = u % tiles * 32 + tx, split = u / tiles;\n";
  emit_piece_range(out, "    ");
  declare_accumulators(out, "    ", rs);
  out << "    if (o < outputs) {\n";
  w.decompose(out, "      ", "o", ax.kept, "ro");
  emit_accumulate(out, w, "      ", "q0 + ty", std::to_string(kColumnSlices), ax.reduced, rs);
  out << "    }\n";
  for (size_t j = 0; j < rs.size(); ++j) out << "    " << nth("part", j) << "[threadIdx.x] = " << acc_name(j) << ";\n";
  out << "    __syncthreads();\n";
  out << "    if (ty == 0 && o < outputs) {\n";
  for (size_t j = 0; j < rs.size(); ++j)
    out << "      for (int y = 1; y < " << kColumnSlices << "; ++y) " << acc_name(j) << " = " << rs[j].op << "("
        << acc_name(j) << ", " << nth("part", j) << "[y * 32 + tx]);\n";
  w.decompose(out, "      ", "o", ax.kept, "ro");
  emit_finish(out, w, fs, "      ", "o", "outputs", ax.reduced, rs);
  out << "    }\n    __syncthreads();\n  }\n";
  emit_one_pass_tail(out, w, fs, "outputs", ax, rs);
}

}  // namespace

const char* reduction_params() {
  return ", void* __restrict__ tj_partials, tj_i64 chunk, unsigned int* __restrict__ tj_ticket";
}

void plan_reduction(const KernelWriter& w, EmittedKernel& info) {
  const kir::Kernel& k = w.kernel();
  const Axes ax = axes_of(k);
  info.outputs = w.count(ax.kept);
  info.reduced = w.count(ax.reduced);
  // Threads go along the reduced points when they are innermost: all of them (a row), or a
  // run of at least a warp's width (NCHW's H,W around a kept C), so a warp reads consecutive
  // addresses; otherwise along the outputs (a kept axis innermost: [B, C] over B).
  const int rank = k.space.rank();
  kir::Affine run{1, 0};
  for (int a = rank - 1; a >= 0 && std::binary_search(ax.reduced.begin(), ax.reduced.end(), a); --a)
    run = k.space[a] == kBatch ? kir::Affine{0, run.c} : kir::Affine{run.c * k.space[a], run.b * k.space[a]};
  const bool trailing = ax.kept.empty() || ax.reduced.empty() || ax.kept.back() < ax.reduced.front();
  const bool rows = trailing || run.b != 0 || run.c >= 32;
  const std::vector<Reduction> rs = reductions_of(w);
  info.shared_bytes = 0;
  info.partial_bytes = 0;
  for (const Reduction& r : rs) info.partial_bytes += r.bytes;
  if (rows) {
    const bool warp = info.reduced.b == 0 && info.reduced.c <= kWarpRowLimit;
    info.scheme = warp ? Scheme::row_per_warp : Scheme::row_per_block;
    if (!warp)
      for (const Reduction& r : rs) info.shared_bytes += 32 * r.bytes;
  } else {
    info.scheme = Scheme::column;
    for (const Reduction& r : rs) info.shared_bytes += info.block * r.bytes;
  }
  if (info.may_split()) info.combine_symbol = k.name + "_combine";
}

void emit_partial_struct(std::ostream& out, const KernelWriter& w) {
  const std::vector<Reduction> rs = reductions_of(w);
  out << "// One output's partial over one piece of its reduced points (pass 1 of " << w.kernel().name << " writes\n"
      << "// them at [split][output] when the launch splits the reduced points).\n";
  out << "struct " << partial_type(w) << " {";
  for (size_t j = 0; j < rs.size(); ++j) out << " " << rs[j].type << " " << acc_name(j) << ";";
  out << " };\n";
}

void emit_reduction_body(std::ostream& out, const KernelWriter& w, const Finishers& fs, EmittedKernel& info) {
  const Axes ax = axes_of(w.kernel());
  if (info.scheme == Scheme::column) emit_column_body(out, w, fs, info, ax);
  else emit_row_body(out, w, fs, info, ax);
}

void emit_combine_kernel(std::ostream& out, const KernelWriter& w, const Finishers& fs, const EmittedKernel& info,
                         const std::string& params) {
  const kir::Kernel& k = w.kernel();
  const Axes ax = axes_of(k);
  const std::vector<Reduction> rs = reductions_of(w);
  const std::string t = partial_type(w);
  out << "// " << info.combine_symbol << ": pass 2 of " << k.name << ", launched only when its reduced points ran in\n"
      << "// several pieces. One warp per output: lane l folds the partials of pieces l, l + 32, l + 64, ...\n"
      << "// in that order, the warp's shuffle tree folds the 32 lanes, and lane 0 stores the result.\n";
  out << "extern \"C\" __global__ void __launch_bounds__(" << info.block << ") " << info.combine_symbol << "(\n    " << params
      << ") {\n";
  out << "  const tj_i64 outputs = " << KernelWriter::affine(info.outputs) << ", len = " << KernelWriter::affine(info.reduced)
      << ";\n";
  out << "  const tj_i64 splits = len > chunk ? (len + chunk - 1) / chunk : 1;\n";
  out << "  const " << t << "* const partials = (const " << t << "*)tj_partials;\n";
  out << "  const int lane = threadIdx.x & 31;\n";
  out << "  for (tj_i64 o = TJ_GLOBAL_THREAD >> 5; o < outputs; o += TJ_GRID_THREADS >> 5) {\n";
  emit_fold_partials(out, w, fs, "    ", "outputs", "TJ_WORK", ax, rs);
  out << "  }\n}\n\n";
}

}  // namespace towerjit::cuda::detail
