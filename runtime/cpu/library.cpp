#include "runtime/cpu/library.h"

#include "runtime/cpu/attention.h"
#include "runtime/cpu/conv.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/gemm_half.h"
#include "runtime/cpu/half_conv.h"
#include "runtime/cpu/layer_norm.h"
#include "runtime/cpu/relaxed_copy.h"
#include "runtime/cpu/softmax.h"
#include "runtime/cpu/pool.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "dsl/error.h"
#include "dsl/index_errors.h"
#include "jit/kir/matmul_geometry.h"

namespace towerjit::cpujit {
namespace {

// The call's epilogue (kir::Epilogue) over rows [first, last) of one [m, n] product:
// the same float operations, in the same order, as the loop kernel it replaced (the product's
// element, plus the bias, then the DSL's relu: NaN stays NaN).
void apply_epilogue(kir::Epilogue e, const float* bias, float* out, int64_t n, int64_t first, int64_t last) {
  const bool relu = e == kir::Epilogue::bias_relu;
  for (int64_t i = first; i < last; ++i) {
    float* row = out + i * n;
    for (int64_t j = 0; j < n; ++j) {
      const float v = row[j] + bias[j];
      row[j] = relu && v <= 0.0f ? 0.0f : v;
    }
  }
}

// Row-major matrix product of the last two axes; leading axes broadcast numpy-style. Products
// sharing their right operand run as one; a batch of products is split over the pool by
// product when there are enough of them, else each product is. The epilogue follows each
// product while its rows are still in cache.
void matmul(const kir::LibraryCall& c, const std::vector<View>& in, const View& out, ThreadPool* pool) {
  const View &a = in[0], &b = in[1];
  kir::MatMulGeometry g = kir::matmul_geometry(c, a.shape, b.shape, out.shape);
  kir::fold_batches_into_rows(c, g);
  auto epilogue = [&](int64_t bi, ThreadPool* split) {
    if (c.epilogue == kir::Epilogue::none) return;
    float* o = out.f() + bi * g.m * g.n;
    const float* bias = in[2].f();
    if (!split) return apply_epilogue(c.epilogue, bias, o, g.n, 0, g.m);
    split->parallel_for(g.m, [&](int64_t first, int64_t last) {
      apply_epilogue(c.epilogue, bias, o, g.n, first, last);
    });
  };
  auto product = [&](int64_t bi, ThreadPool* split) {
    if (is_half_float(a.dtype)) {  // bf16 or f16 operands, f32 accumulator and result
      half_gemm(split, a.dtype, c.transpose_a, c.transpose_b, g.m, g.n, g.k, a.h() + g.offset_a[bi], g.lda,
                b.h() + g.offset_b[bi], g.ldb, out.f() + bi * g.m * g.n, g.n);
    } else {
      sgemm(split, c.transpose_a, c.transpose_b, g.m, g.n, g.k, a.f() + g.offset_a[bi], g.lda,
            b.f() + g.offset_b[bi], g.ldb, 0.0f, out.f() + bi * g.m * g.n, g.n);
    }
    epilogue(bi, split);
  };
  if (pool && g.batches >= pool->size()) {
    pool->parallel_for(g.batches, [&](int64_t first, int64_t last) {
      for (int64_t bi = first; bi < last; ++bi) product(bi, nullptr);
    });
  } else {
    for (int64_t bi = 0; bi < g.batches; ++bi) product(bi, pool);
  }
}

void one_hot(const Node& node, const View& labels, const View& out) {
  const int64_t depth = node.attrs.depth, count = labels.shape.elements(0);
  std::fill(out.f(), out.f() + count * depth, 0.0f);
  for (int64_t i = 0; i < count; ++i) {
    const int32_t v = labels.i()[i];
    if (v < 0 || v >= depth) throw detail::one_hot_out_of_range(node, v, i);
    out.f()[i * depth + v] = 1.0f;
  }
}

// A gather's table as [outer, rows, inner] around its axis, its output (or dy) as
// [outer, count, inner]; every index checked against the rows first.
struct GatherGeometry {
  int64_t outer = 1, rows = 0, inner = 1, count = 0;
};

GatherGeometry gather_geometry(const Node& node, const Shape& table, const View& indices) {
  const int axis = node.attrs.axis;
  GatherGeometry g{1, table[axis], 1, indices.shape.elements(0)};
  for (int d = 0; d < axis; ++d) g.outer *= table[d];
  for (int d = axis + 1; d < table.rank(); ++d) g.inner *= table[d];
  for (int64_t i = 0; i < g.count; ++i) {
    const int32_t v = indices.i()[i];
    if (v < 0 || v >= g.rows) throw detail::gather_out_of_range(node, v, i, indices.shape, g.rows);
  }
  return g;
}

// Rows of 4-byte elements copied whole: any dtype. Relaxed: the table may be a variable that an
// async tower's apply is writing now (relaxed_copy.h).
void gather(const Node& node, const View& table, const View& indices, const View& out) {
  const GatherGeometry g = gather_geometry(node, table.shape, indices);
  const auto* src = static_cast<const char*>(table.data);
  auto* dst = static_cast<char*>(out.data);
  const int64_t row = g.inner * 4;
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t i = 0; i < g.count; ++i)
      copy_relaxed(dst + (o * g.count + i) * row, src + (o * g.rows + indices.i()[i]) * row, row);
}

// Zeros, then each slice of dy added into its row in index order: every element's sum runs in
// the order the GPU's kernel (tj_gather_grad) uses, so the two agree bitwise.
void gather_grad(const Node& node, const View& indices, const View& dy, const View& out) {
  const GatherGeometry g = gather_geometry(node, out.shape, indices);
  std::fill(out.f(), out.f() + out.shape.elements(0), 0.0f);
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t i = 0; i < g.count; ++i) {
      float* to = out.f() + (o * g.rows + indices.i()[i]) * g.inner;
      const float* from = dy.f() + (o * g.count + i) * g.inner;
      for (int64_t in = 0; in < g.inner; ++in) to[in] += from[in];
    }
}

// Positions sorted stably by index, so each row's values are summed in index order (as
// gather_grad sums them: the same row bitwise), then the sum written at every position of it.
void combine_rows(const Node& node, const View& indices, const View& values, const View& out) {
  const GatherGeometry g = gather_geometry(node, node.attrs.shape, indices);
  std::vector<int64_t> order(g.count);
  for (int64_t i = 0; i < g.count; ++i) order[i] = i;
  const int32_t* idx = indices.i();
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return idx[a] < idx[b]; });
  std::vector<float> sum(g.inner);
  for (int64_t first = 0; first < g.count;) {
    int64_t last = first;
    while (last < g.count && idx[order[last]] == idx[order[first]]) ++last;
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int64_t k = first; k < last; ++k) {
      const float* from = values.f() + order[k] * g.inner;
      for (int64_t in = 0; in < g.inner; ++in) sum[in] += from[in];
    }
    for (int64_t k = first; k < last; ++k) std::copy(sum.begin(), sum.end(), out.f() + order[k] * g.inner);
    first = last;
  }
}

// The table copied unless the output is the table itself (written in place), then each row:
// relaxed, as an async tower's gather may be reading that variable now (relaxed_copy.h).
void scatter_rows(const Node& node, const View& table, const View& indices, const View& rows, const View& out) {
  const GatherGeometry g = gather_geometry(node, table.shape, indices);
  if (out.data != table.data) std::memcpy(out.data, table.data, table.shape.elements(0) * 4);
  for (int64_t i = 0; i < g.count; ++i)
    copy_relaxed(out.f() + indices.i()[i] * g.inner, rows.f() + i * g.inner, g.inner * 4);
}

void argmax(const Node& node, const View& x, const View& out) {
  const int axis = node.attrs.axis;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= x.shape[i];
  for (int i = axis + 1; i < x.shape.rank(); ++i) inner *= x.shape[i];
  const int64_t n = x.shape[axis];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      int64_t best = 0;
      // The first maximum, a NaN larger than every number, as the reference's (eval_nn.cpp).
      for (int64_t j = 1; j < n; ++j) {
        const float v = x.f()[(o * n + j) * inner + in], b = x.f()[(o * n + best) * inner + in];
        if (v > b || (v != v && b == b)) best = j;
      }
      out.i()[o * inner + in] = static_cast<int32_t>(best);
    }
}

// Copies `src` into the box of `dst` starting at `origin` (pad writes inside zeros, concat
// writes each part at its offset along the axis). Rows of the last axis move with memcpy; the
// destination offset is carried from row to row like an odometer (a division and a remainder
// per axis and row had made gpt-small's two pads of attention gradients [32,4,64,16] rows of 16
// floats 0.26 ms a step).
void copy_box(const View& src, const View& dst, const std::vector<int64_t>& origin) {
  const int r = src.shape.rank();
  if (r == 0) { std::memcpy(dst.data, src.data, 4); return; }
  const int64_t rows = src.shape.elements(0) / src.shape[r - 1], row_bytes = src.shape[r - 1] * 4;
  std::vector<int64_t> stride(r), index(r, 0);  // dst's strides; src's index along each axis
  stride[r - 1] = 1;
  for (int i = r - 2; i >= 0; --i) stride[i] = stride[i + 1] * dst.shape[i + 1];
  int64_t off = 0;
  for (int i = 0; i < r; ++i) off += origin[i] * stride[i];
  const char* from = static_cast<const char*>(src.data);
  char* to = static_cast<char*>(dst.data);
  for (int64_t row = 0; row < rows; ++row, from += row_bytes) {
    std::memcpy(to + off * 4, from, row_bytes);
    for (int i = r - 2; i >= 0; --i) {  // the next row of src: carry along the axes
      off += stride[i];
      if (++index[i] < src.shape[i]) break;
      off -= index[i] * stride[i];
      index[i] = 0;
    }
  }
}

// A convolution, with its epilogue and pool (jit/passes/conv_pools.h) where it has them.
void convolution(const kir::LibraryCall& call, const std::vector<View>& in, const View& out, const View& codes,
                 ThreadPool* pool) {
  ConvEpilogue epilogue{call.epilogue, call.epilogue == kir::Epilogue::none ? nullptr : in[2].f()};
  if (call.codes < 0) return conv2d(call.attrs, in[0], in[1], out, pool, epilogue);
  epilogue.pooled = out.f();
  epilogue.codes = static_cast<uint8_t*>(codes.data);
  epilogue.pool_level = vector_level(cpu_isa());
  conv2d(call.attrs, in[0], in[1], {kir::conv_result_shape(out.shape, call), nullptr, DType::f32}, pool, epilogue);
}

// A convolution's gradient, its dy routed from a pool's codes (jit/passes/conv_pools.h) where
// it is: inputs {pooled dy, w, codes} or {x, pooled dy, codes}.
void convolution_gradient(const kir::LibraryCall& call, const std::vector<View>& in, const View& out, ThreadPool* pool) {
  const bool filter = call.op == Op::Conv2DGradFilter;
  View dy = in[filter ? 1 : 0];
  RoutedPoolGradient routed{};
  if (call.codes >= 0) {
    routed = routed_by_codes(in[2], dy, call.attrs.relu_mask);
    dy = {kir::conv_result_shape(dy.shape, call), nullptr, DType::f32, &routed};
  }
  if (filter) return conv2d_grad_filter(call.attrs, in[0], dy, out, pool);
  conv2d_grad_input(call.attrs, dy, in[1], out, pool);
}

}  // namespace

void run_library_call(const kir::LibraryCall& call, const Node& node, const std::vector<View>& in,
                      const View& out, ThreadPool* pool, const View& codes) {
  const bool conv = call.op == Op::Conv2D || call.op == Op::Conv2DGradInput || call.op == Op::Conv2DGradFilter;
  if (conv && is_half_float(out.dtype)) return half_convolution(call.op, call.attrs, in[0], in[1], out, pool);
  switch (call.op) {
    case Op::MatMul: return matmul(call, in, out, pool);
    case Op::Conv2D: return convolution(call, in, out, codes, pool);
    case Op::Conv2DGradInput: case Op::Conv2DGradFilter: return convolution_gradient(call, in, out, pool);
    case Op::MaxPool2DGrad:
      if (call.codes >= 0) return max_pool2d_grad_by_codes(call.attrs, in[0], in[1], out, pool);
      return pool2d(call.op, call.attrs, in, out, pool);
    case Op::MaxPool2D: case Op::AvgPool2D: case Op::AvgPool2DGrad:
      return pool2d(call.op, call.attrs, in, out, pool);
    case Op::OneHot: return one_hot(node, in[0], out);
    case Op::ArgMax: return argmax(node, in[0], out);
    case Op::Gather: return gather(node, in[0], in[1], out);
    case Op::GatherGrad: return gather_grad(node, in[0], in[1], out);
    case Op::CombineRows: return combine_rows(node, in[0], in[1], out);
    case Op::ScatterRows: return scatter_rows(node, in[0], in[1], in[2], out);
    case Op::Attention: return attention(call.attrs, in, out, pool);
    case Op::AttentionGradQ: return attention_grad_q(call.attrs, in, out, pool);
    case Op::AttentionGradKV: return attention_grad_kv(call.attrs, in, out, pool);
    case Op::LayerNorm: return layer_norm(call.attrs, in, out, pool);
    case Op::LayerNormGradInput: return layer_norm_grad_input(call.attrs, in, out, pool);
    case Op::LayerNormGradParams: return layer_norm_grad_params(call.attrs, in, out, pool);
    case Op::Softmax: return softmax(in, out, pool);
    case Op::SoftmaxGrad: return softmax_grad(in, out, pool);
    case Op::Pad:
      std::memset(out.data, 0, out.shape.elements(0) * 4);
      return copy_box(in[0], out, call.attrs.begin);
    case Op::Concat: {
      std::vector<int64_t> origin(out.shape.rank(), 0);
      for (const View& part : in) {
        copy_box(part, out, origin);
        origin[call.attrs.axis] += part.shape[call.attrs.axis];
      }
      return;
    }
    default:
      internal_check(false) << "no CPU library routine for " << op_name(call.op);
  }
}

}  // namespace towerjit::cpujit
