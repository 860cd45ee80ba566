// Mirrors runtime/cpu/library.cpp call for call; the kernels' parameter blocks are the C
// structs of jit/cuda/device/library_params.h, which NVRTC compiles too.
#include "runtime/cuda/library.h"

#include <algorithm>

#include "dsl/error.h"
#include "dsl/index_errors.h"
#include "jit/kir/attention_geometry.h"
#include "jit/kir/matmul_geometry.h"
#include "jit/cuda/device/library_params.h"
#include "runtime/cuda/conv_choice.h"
#include "runtime/cuda/implicit_gemm_conv.h"

namespace towerjit::cuda {
namespace {

constexpr int kBlock = 256;  // the library kernels are grid-stride loops of any grid

std::string describe(const Node& node) {
  return std::string(op_name(node.op)) + " at " + format_location(node) +
         (node.scope.empty() ? "" : " in \"" + node.scope + "\"");
}

// Launches library kernel `name` over `work` items with arguments `args...` (each passed by
// address, as cuLaunchKernel wants).
template <typename... Args>
void launch_library(LibraryEnv& env, const char* name, int64_t work, const Node& node, Args&... args) {
  if (work <= 0) return;
  void* params[] = {static_cast<void*>(&args)...};
  launch(env.device.library_module().function(name), grid_for(work, kBlock, env.device), kBlock, env.stream,
         params, std::string(name) + " for " + describe(node), node.loc);
}

Cublas& blas(LibraryEnv& env) {
  internal_check(env.blas) << "a matrix product in a program without a cuBLAS handle";
  return *env.blas;
}

// The runtime sized the scratch before the run (library_scratch_bytes): growing it here
// would hand the old block back while queued work still reads it.
CUdeviceptr scratch(LibraryEnv& env, int64_t floats) {
  internal_check(env.scratch.bytes() >= static_cast<size_t>(floats) * 4)
      << "library scratch of " << env.scratch.bytes() << " bytes for " << floats << " floats";
  return env.scratch.ptr();
}

// Row-major matrix product of the last two axes; leading axes broadcast numpy-style, through
// cuBLASLt (or cuBLAS without it: Cublas::matmul). One strided-batched GEMM when every
// operand's batch offset is a multiple of the batch index (the usual case, a broadcast operand
// having stride 0), else one GEMM per batch. bf16 or f16 operands (both the same) give an f32
// product accumulated in f32, on cuBLASLt only. The call's epilogue (bias, then ReLU) is
// cuBLASLt's; where it cannot take it (no cuBLASLt, or no algorithm for the shape with it),
// tj_matmul_epilogue applies it after the product, with the same float operations.
void matmul(const kir::LibraryCall& c, const Node& node, const std::vector<DeviceView>& in, const DeviceView& out,
            LibraryEnv& env) {
  const DeviceView &a = in[0], &b = in[1];
  const LtEpilogue epilogue{c.epilogue, c.epilogue == kir::Epilogue::none ? CUdeviceptr{0} : in[2].ptr};
  const kir::MatMulGeometry g = kir::matmul_geometry(c, a.shape, b.shape, out.shape);
  const int64_t batches = g.batches, m = g.m, n = g.n;
  const int64_t stride_a = batches > 1 ? g.offset_a[1] : 0, stride_b = batches > 1 ? g.offset_b[1] : 0;
  bool linear = true;
  for (int64_t bi = 0; bi < batches; ++bi)
    linear = linear && g.offset_a[bi] == bi * stride_a && g.offset_b[bi] == bi * stride_b;
  const std::string what = describe(node);
  internal_check(a.dtype == b.dtype && out.dtype == DType::f32)
      << what << ": operands " << dtype_name(a.dtype) << " x " << dtype_name(b.dtype) << " into " << dtype_name(out.dtype);
  // Where the product ran without its epilogue: tj_matmul_epilogue over those `count` matrices.
  auto finish = [&](bool applied, CUdeviceptr first, int64_t count) {
    if (applied) return;
    CUdeviceptr o = first, bias = epilogue.bias;
    long long rows = count * m, cols = n;
    int relu = c.epilogue == kir::Epilogue::bias_relu;
    launch_library(env, "tj_matmul_epilogue", rows * cols, node, o, bias, rows, cols, relu);
  };
  if (linear) {
    finish(blas(env).matmul(c.transpose_a, c.transpose_b, m, n, g.k, a.ptr, g.lda, stride_a, b.ptr, g.ldb, stride_b,
                            out.ptr, n, m * n, batches, what, a.dtype, epilogue),
           out.ptr, batches);
    return;
  }
  const int64_t size = dtype_bytes(a.dtype);
  for (int64_t bi = 0; bi < batches; ++bi) {
    const CUdeviceptr o = out.ptr + bi * m * n * 4;
    finish(blas(env).matmul(c.transpose_a, c.transpose_b, m, n, g.k, a.ptr + g.offset_a[bi] * size, g.lda, 0,
                            b.ptr + g.offset_b[bi] * size, g.ldb, 0, o, n, 0, 1, what, a.dtype, epilogue),
           o, 1);
  }
}

TjConvShape conv_shape(const Attrs& at, const Shape& x, const Shape& w, const Shape& y) {
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], at.stride[0], at.stride[1], at.pad[0], at.pad[1]};
}

// The convolution's geometry and cuDNN pass, from the call's operands in their roles per op.
struct ConvCall {
  TjConvShape g;
  ConvPass pass;
};

ConvCall conv_call(Op op, const Attrs& at, const std::vector<Shape>& in, const Shape& out) {
  switch (op) {
    case Op::Conv2D: return {conv_shape(at, in[0], in[1], out), ConvPass::forward};            // x, w -> y
    case Op::Conv2DGradInput: return {conv_shape(at, out, in[1], in[0]), ConvPass::data_gradient};  // dy, w -> dx
    default: return {conv_shape(at, in[0], out, in[1]), ConvPass::filter_gradient};           // x, dy -> dw
  }
}

// Conv2D, its data gradient and its filter gradient: cuDNN's planned algorithm or towerjit's
// implicit GEMM, whichever the choice made before the run (library_scratch_bytes) kept; the
// scratch as the workspace. A Conv2D's epilogue (bias, then ReLU) is the implicit GEMM's own,
// as it stores; after cuDNN's forward, tj_conv_epilogue applies it, the same float operations.
void convolution(const kir::LibraryCall& call, const Node& node, const std::vector<DeviceView>& in,
                 const DeviceView& out, LibraryEnv& env) {
  const ConvCall cc = conv_call(call.op, node.attrs, {in[0].shape, in[1].shape}, out.shape);
  if (cc.g.n == 0) {  // no images: nothing to compute, and a filter gradient of zeros
    if (cc.pass == ConvPass::filter_gradient)
      check_cuda(require_driver().MemsetD8Async(out.ptr, 0, out.shape.elements(0) * dtype_bytes(node.dtype),
                                                env.stream.handle()),
                 "cuMemsetD8Async");
    return;
  }
  const ConvChoice choice = choose_convolution(env.dnn, cc.pass, cc.g, node.dtype, describe(node), node.loc);
  internal_check(env.scratch.bytes() >= choice.scratch_bytes)
      << "library scratch of " << env.scratch.bytes() << " bytes for a convolution's " << choice.scratch_bytes;
  const ConvBias bias{call.epilogue == kir::Epilogue::none ? CUdeviceptr{0} : in[2].ptr,
                      call.epilogue == kir::Epilogue::bias_relu};
  internal_check(!bias.ptr || (cc.pass == ConvPass::forward && node.dtype == DType::f32))
      << describe(node) << ": an epilogue on a " << dtype_name(node.dtype) << " convolution pass";
  if (choice.implicit_gemm)
    return queue_implicit_gemm(cc.pass, cc.g, in[0].ptr, in[1].ptr, out.ptr, env.scratch.ptr(), bias, env.device,
                               env.stream, describe(node), node.loc);
  env.dnn->run(cc.pass, cc.g, in[0].ptr, in[1].ptr, out.ptr, env.scratch.ptr(), env.scratch.bytes(), describe(node),
               node.dtype);
  if (bias.ptr) {
    CUdeviceptr y = out.ptr, b = bias.ptr;
    long long total = out.shape.elements(0), channels = cc.g.o, pixels = cc.g.oh * cc.g.ow;
    int relu = bias.relu;
    launch_library(env, "tj_conv_epilogue", total, node, y, b, total, channels, pixels, relu);
  }
}

void pool(Op op, const Node& node, const std::vector<DeviceView>& in, const DeviceView& out, LibraryEnv& env) {
  const bool grad = op == Op::MaxPool2DGrad || op == Op::AvgPool2DGrad;
  const Shape& xs = grad ? out.shape : in[0].shape;
  const Shape& ys = grad ? in.back().shape : out.shape;
  const Attrs& at = node.attrs;
  TjPoolShape s{xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3], at.kernel[0], at.kernel[1],
                at.stride[0], at.stride[1], at.pad[0], at.pad[1], at.relu_mask ? 1 : 0};
  const int64_t outputs = s.planes * s.oh * s.ow, inputs = s.planes * s.h * s.w;
  CUdeviceptr x = in[0].ptr, dy = in.back().ptr, o = out.ptr;
  // 16-bit max pools (the precision policy's, jit/passes/half_convolutions.h): kernels of their own.
  auto max_pool = [&](const char* name) {
    std::string kernel = name;
    if (is_half_float(out.dtype)) kernel.append("_").append(dtype_name(out.dtype));
    return kernel;
  };
  switch (op) {
    case Op::MaxPool2D: return launch_library(env, max_pool("tj_max_pool2d").c_str(), outputs, node, x, o, s);
    case Op::MaxPool2DGrad:
      return launch_library(env, max_pool("tj_max_pool2d_grad").c_str(), inputs, node, x, dy, o, s);
    case Op::AvgPool2D: return launch_library(env, "tj_avg_pool2d", outputs, node, x, o, s);
    default: return launch_library(env, "tj_avg_pool2d_grad", inputs, node, dy, o, s);
  }
}

// The fused attention ops: blocks of 16 rows (queries, or keys for dk and dv), 16 threads a
// row, tiles of the other side in shared memory (library_kernels.cu); a block-stride loop, so
// any grid does, capped as the grid-stride kernels' grids are.
void attention(Op op, const Node& node, const std::vector<DeviceView>& in, const DeviceView& out, LibraryEnv& env) {
  constexpr int kRows = 16, kThreads = kRows * 16;  // TJ_ATTN_ROWS, TJ_ATTN_ROWS * TJ_ATTN_LANES
  const kir::AttentionGeometry g = kir::attention_geometry(in[0].shape, in[2].shape, node.attrs.causal);
  TjAttentionShape s{g.batches, g.tq, g.tk, g.d, g.dv, static_cast<float>(node.attrs.value), g.causal ? 1 : 0};
  const int64_t rows = op == Op::AttentionGradKV ? g.tk : g.tq;
  const int64_t items = g.batches * ((rows + kRows - 1) / kRows);
  if (items == 0) return;
  const int64_t grid = std::min<int64_t>(items, int64_t{32} * env.device.sm_count());
  CUdeviceptr q = in[0].ptr, k = in[1].ptr, v = in[2].ptr, o = out.ptr;
  const char* name = op == Op::Attention ? "tj_attention" : op == Op::AttentionGradQ ? "tj_attention_grad_q" : "tj_attention_grad_kv";
  const std::string what = std::string(name) + " for " + describe(node);
  if (op == Op::Attention) {
    void* params[] = {&q, &k, &v, &o, &s};
    return launch(env.device.library_module().function(name), grid, kThreads, env.stream, params, what, node.loc);
  }
  CUdeviceptr y = in[3].ptr, dy = in[4].ptr;
  void* params[] = {&q, &k, &v, &y, &dy, &o, &s};
  launch(env.device.library_module().function(name), grid, kThreads, env.stream, params, what, node.loc);
}

// The fused layer norm ops: a warp a row, 8 rows a block (TJ_LN_WARPS), a block-stride loop
// capped as the grid-stride kernels' grids are; the gain's and bias' gradients as partial sums
// over blocks of 64 rows (TJ_LN_PARAM_ROWS) in the scratch, then one sum per column.
constexpr int64_t kNormRowsPerBlock = 8, kNormParamRows = 64;

TjNormShape norm_shape(const Node& node, const Shape& x) {
  const int64_t n = x[x.rank() - 1];
  return {n == 0 ? 0 : x.elements(0) / n, n, static_cast<float>(node.attrs.value), node.attrs.rms ? 1 : 0};
}

void layer_norm(Op op, const Node& node, const std::vector<DeviceView>& in, const DeviceView& out, LibraryEnv& env) {
  TjNormShape s = norm_shape(node, in[0].shape);
  const int64_t cap = int64_t{32} * env.device.sm_count();
  CUdeviceptr x = in[0].ptr, o = out.ptr;
  if (op == Op::LayerNormGradParams) {
    const long long width = s.rms ? s.n : 2 * s.n, blocks = (s.rows + kNormParamRows - 1) / kNormParamRows;
    if (blocks == 0) {
      check_cuda(require_driver().MemsetD32Async(out.ptr, 0u, width, env.stream.handle()), "cuMemsetD32Async");
      return;
    }
    CUdeviceptr dy = in[1].ptr, partials = scratch(env, blocks * width);
    void* params[] = {&x, &dy, &partials, &s};
    launch(env.device.library_module().function("tj_layer_norm_grad_params_partial"), std::min<int64_t>(blocks, cap),
           kBlock, env.stream, params, "tj_layer_norm_grad_params_partial for " + describe(node), node.loc);
    long long b = blocks, w = width;
    return launch_library(env, "tj_layer_norm_grad_params_sum", width, node, partials, o, b, w);
  }
  const int64_t items = (s.rows + kNormRowsPerBlock - 1) / kNormRowsPerBlock;
  if (items == 0) return;
  const int64_t grid = std::min(items, cap);
  CUdeviceptr gain = in[1].ptr, third = op == Op::LayerNorm ? (s.rms ? CUdeviceptr{0} : in[2].ptr) : in[2].ptr;
  const char* name = op == Op::LayerNorm ? "tj_layer_norm" : "tj_layer_norm_grad_input";
  void* params[] = {&x, &gain, &third, &o, &s};
  launch(env.device.library_module().function(name), grid, kBlock, env.stream, params,
         std::string(name) + " for " + describe(node), node.loc);
}

// The fused softmax: the layer norm's launch shape (a warp a row, 8 rows a block).
void softmax(Op op, const Node& node, const std::vector<DeviceView>& in, const DeviceView& out, LibraryEnv& env) {
  const Shape& xs = in[0].shape;
  const long long n = xs[xs.rank() - 1];
  TjRowsShape s{n == 0 ? 0 : xs.elements(0) / n, n};
  const int64_t items = (s.rows + kNormRowsPerBlock - 1) / kNormRowsPerBlock;
  if (items == 0) return;
  const int64_t grid = std::min<int64_t>(items, int64_t{32} * env.device.sm_count());
  CUdeviceptr x = in[0].ptr, o = out.ptr;
  CUdeviceptr dy = op == Op::SoftmaxGrad ? in[1].ptr : CUdeviceptr{0};
  const char* name = op == Op::Softmax ? "tj_softmax" : "tj_softmax_grad";
  void* forward[] = {&x, &o, &s};
  void* backward[] = {&x, &dy, &o, &s};
  launch(env.device.library_module().function(name), grid, kBlock, env.stream, op == Op::Softmax ? forward : backward,
         std::string(name) + " for " + describe(node), node.loc);
}

// An index check's slot (one_hot, the gathers, the sparse apply) to "no error" (all ones: the
// kernels keep the smallest (position, value) with atomicMin).
void clear_error_slot(LibraryEnv& env, Op op) {
  internal_check(env.error_slot != 0) << op_name(op) << " without an error slot";
  check_cuda(require_driver().MemsetD32Async(env.error_slot, 0xffffffffu, 2, env.stream.handle()), "cuMemsetD32Async");
}

TjBox box(const Shape& src, const Shape& dst, const std::vector<int64_t>& origin, const Node& node) {
  internal_check(src.rank() <= 8 && src.rank() == dst.rank() && static_cast<int>(origin.size()) == src.rank())
      << op_name(node.op) << " of rank " << src.rank() << " on the GPU (at most 8)";
  TjBox b{};
  b.rank = src.rank();
  for (int d = 0; d < b.rank; ++d) b.src[d] = src[d], b.dst[d] = dst[d], b.origin[d] = origin[d];
  return b;
}

}  // namespace

void run_library_call(const kir::LibraryCall& call, const Node& node, const std::vector<DeviceView>& in,
                      const DeviceView& out, LibraryEnv& env) {
  env.device.make_current();
  switch (call.op) {
    case Op::MatMul: return matmul(call, node, in, out, env);
    case Op::Conv2D: case Op::Conv2DGradInput: case Op::Conv2DGradFilter:
      return convolution(call, node, in, out, env);
    case Op::MaxPool2D: case Op::MaxPool2DGrad: case Op::AvgPool2D: case Op::AvgPool2DGrad:
      return pool(call.op, node, in, out, env);
    case Op::Attention: case Op::AttentionGradQ: case Op::AttentionGradKV:
      return attention(call.op, node, in, out, env);
    case Op::LayerNorm: case Op::LayerNormGradInput: case Op::LayerNormGradParams:
      return layer_norm(call.op, node, in, out, env);
    case Op::Softmax: case Op::SoftmaxGrad: return softmax(call.op, node, in, out, env);
    case Op::OneHot: {
      clear_error_slot(env, call.op);
      CUdeviceptr labels = in[0].ptr, o = out.ptr, slot = env.error_slot;
      long long count = in[0].shape.elements(0), depth = node.attrs.depth;
      return launch_library(env, "tj_one_hot", count * depth, node, labels, o, count, depth, slot);
    }
    case Op::Gather: case Op::GatherGrad: {
      clear_error_slot(env, call.op);
      const bool fwd = call.op == Op::Gather;
      const Shape& table = fwd ? in[0].shape : out.shape;
      const DeviceView& indices = fwd ? in[1] : in[0];
      const int axis = node.attrs.axis;
      long long outer = 1, rows = table[axis], count = indices.shape.elements(0), inner = 1;
      for (int i = 0; i < axis; ++i) outer *= table[i];
      for (int i = axis + 1; i < table.rank(); ++i) inner *= table[i];
      CUdeviceptr idx = indices.ptr, o = out.ptr, slot = env.error_slot;
      if (fwd) {
        CUdeviceptr t = in[0].ptr;
        return launch_library(env, "tj_gather", outer * count * inner, node, t, idx, o, outer, rows, count, inner,
                              slot);
      }
      check_cuda(require_driver().MemsetD32Async(out.ptr, 0u, out.shape.elements(0), env.stream.handle()),
                 "cuMemsetD32Async");
      CUdeviceptr dy = in[1].ptr;
      return launch_library(env, "tj_gather_grad", outer * inner, node, idx, dy, o, outer, rows, count, inner, slot);
    }
    case Op::CombineRows: {  // (indices, values) -> values' shape, rows of the table attrs.shape
      clear_error_slot(env, call.op);
      CUdeviceptr idx = in[0].ptr, values = in[1].ptr, o = out.ptr, slot = env.error_slot;
      long long count = in[0].shape.elements(0), rows = node.attrs.shape[0];
      long long inner = node.attrs.shape.elements(0) / std::max<long long>(rows, 1);
      CUdeviceptr first = scratch(env, 2 * count), next = first + 4 * count;  // ints
      launch_library(env, "tj_combine_rows_links", count, node, idx, first, next, count, rows, slot);
      return launch_library(env, "tj_combine_rows_sum", count * inner, node, values, first, next, o, count, inner);
    }
    case Op::ScatterRows: {  // (table, indices, rows) -> the table with those rows set
      clear_error_slot(env, call.op);
      const Shape& table = in[0].shape;
      if (out.ptr != in[0].ptr)  // else written in place (jit/passes/fusion_plan.cpp)
        check_cuda(require_driver().MemcpyDtoDAsync(out.ptr, in[0].ptr, table.elements(0) * 4, env.stream.handle()),
                   "cuMemcpyDtoDAsync");
      CUdeviceptr idx = in[1].ptr, rows_in = in[2].ptr, o = out.ptr, slot = env.error_slot;
      long long count = in[1].shape.elements(0), rows = table[0];
      long long inner = table.elements(0) / std::max<long long>(rows, 1);
      return launch_library(env, "tj_scatter_rows", count * inner, node, idx, rows_in, o, count, rows, inner, slot);
    }
    case Op::ArgMax: {
      const int axis = node.attrs.axis;
      long long outer = 1, inner = 1, n = in[0].shape[axis];
      for (int i = 0; i < axis; ++i) outer *= in[0].shape[i];
      for (int i = axis + 1; i < in[0].shape.rank(); ++i) inner *= in[0].shape[i];
      CUdeviceptr x = in[0].ptr, o = out.ptr;
      return launch_library(env, "tj_argmax", outer * inner, node, x, o, outer, n, inner);
    }
    case Op::Pad: {
      TjBox b = box(in[0].shape, out.shape, call.attrs.begin, node);
      CUdeviceptr src = in[0].ptr, dst = out.ptr;
      return launch_library(env, "tj_pad", out.shape.elements(0), node, src, dst, b);
    }
    case Op::Concat: {
      std::vector<int64_t> origin(out.shape.rank(), 0);
      for (const DeviceView& part : in) {
        TjBox b = box(part.shape, out.shape, origin, node);
        CUdeviceptr src = part.ptr, dst = out.ptr;
        launch_library(env, "tj_copy_box", part.shape.elements(0), node, src, dst, b);
        origin[call.attrs.axis] += part.shape[call.attrs.axis];
      }
      return;
    }
    default:
      internal_check(false) << "no GPU library routine for " << op_name(call.op);
  }
}

void scale_floats(DeviceContext& device, CUdeviceptr x, int64_t count, double s, const Stream& stream,
                  const std::string& what, std::source_location loc) {
  if (count <= 0) return;
  long long n = count;
  void* params[] = {&x, &n, &s};
  device.make_current();
  launch(device.library_module().function("tj_scale"), grid_for(count, kBlock, device), kBlock, stream, params,
         "tj_scale for " + what, loc);
}

void copy_within(DeviceContext& device, const std::vector<DeviceCopy>& copies, const Stream& stream,
                 const std::string& what, std::source_location loc) {
  device.make_current();
  const auto words = [](const DeviceCopy& c) { return c.bytes % 4 == 0 && c.dst % 4 == 0 && c.src % 4 == 0; };
  const auto copy_call = [&](const DeviceCopy& c) {
    check_cuda(require_driver().MemcpyDtoDAsync(c.dst, c.src, c.bytes, stream.handle()), "cuMemcpyDtoDAsync");
  };
  std::vector<DeviceCopy> batched;
  for (const DeviceCopy& c : copies) {
    if (c.bytes == 0) continue;
    if (words(c)) batched.push_back(c);
    else copy_call(c);
  }
  if (batched.size() == 1) return copy_call(batched[0]);  // a copy call is one launch too
  for (size_t first = 0; first < batched.size(); first += TJ_COPY_JOBS) {
    TjCopyJobs jobs{};
    jobs.count = static_cast<int>(std::min<size_t>(TJ_COPY_JOBS, batched.size() - first));
    int64_t most = 0;
    for (int j = 0; j < jobs.count; ++j) {
      const DeviceCopy& c = batched[first + j];
      jobs.dst[j] = c.dst, jobs.src[j] = c.src, jobs.words[j] = static_cast<long long>(c.bytes / 4);
      most = std::max<int64_t>(most, jobs.words[j]);
    }
    // The largest job's grid, shared out among the jobs: the launch stays within grid_for's cap.
    jobs.blocks_per_job = static_cast<int>(std::max<int64_t>(1, grid_for(most, kBlock, device) / jobs.count));
    void* params[] = {&jobs};
    launch(device.library_module().function("tj_copy_words"), int64_t{jobs.count} * jobs.blocks_per_job, kBlock,
           stream, params, "tj_copy_words for " + what, loc);
  }
}

size_t library_scratch_bytes(const kir::LibraryCall& call, const Node& node, const std::vector<Shape>& in,
                             const Shape& out, Cudnn* dnn) {
  if (call.op == Op::CombineRows) return static_cast<size_t>(in[0].elements(0)) * 8;  // first[], next[]
  if (call.op == Op::LayerNormGradParams) {  // the blocks' partial sums
    const int64_t n = in[0][in[0].rank() - 1], rows = n == 0 ? 0 : in[0].elements(0) / n;
    return static_cast<size_t>((rows + kNormParamRows - 1) / kNormParamRows * out.elements(0)) * 4;
  }
  if (call.op != Op::Conv2D && call.op != Op::Conv2DGradInput && call.op != Op::Conv2DGradFilter) return 0;
  const ConvCall cc = conv_call(call.op, node.attrs, in, out);
  if (cc.g.n == 0) return 0;
  // The implicit GEMMs are f32 only.
  user_check(dnn || !is_half_float(node.dtype), node)
      << "the precision policy runs this convolution (" << op_name(node.op) << ") in " << dtype_name(node.dtype)
      << ", which needs cuDNN, and cuDNN is not used here (" << cudnn_unavailable_reason()
      << "); make cuDNN 9 loadable, or keep convolutions in f32 with Towers::precision({.matmul_operands = ..., "
         ".conv_operands = DType::f32})";
  return choose_convolution(dnn, cc.pass, cc.g, node.dtype, describe(node), node.loc).scratch_bytes;
}

void check_one_hot_slot(const Node& node, uint64_t slot) {
  if (slot == ~uint64_t{0}) return;
  const int64_t i = static_cast<int64_t>(slot >> 32);
  const int32_t v = static_cast<int32_t>(slot & 0xffffffffu);

  throw detail::one_hot_out_of_range(node, v, i);
}

void check_gather_slot(const Node& node, const Shape& table, const Shape& indices, uint64_t slot) {
  if (slot == ~uint64_t{0}) return;
  const int64_t i = static_cast<int64_t>(slot >> 32);
  const int32_t v = static_cast<int32_t>(slot & 0xffffffffu);
  throw detail::gather_out_of_range(node, v, i, indices, table[node.attrs.axis]);
}

}  // namespace towerjit::cuda
