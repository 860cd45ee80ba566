#include "emulator/driver/library_kernel_costs.h"

#include <cmath>

#include "jit/cuda/device/library_params.h"

namespace towerjit::emulator {
namespace {

template <typename T>
const T& param(void** params, int i) {
  return *static_cast<const T*>(params[i]);
}

double box_elements(const long long* dims, int rank) {
  double n = 1;
  for (int d = 0; d < rank; ++d) n *= static_cast<double>(dims[d]);
  return n;
}

// Query-key pairs an attention computes: every pair, or those with key j <= query i.
double attention_pairs(const TjAttentionShape& s) {
  if (!s.causal) return static_cast<double>(s.tq) * s.tk;
  const double full = static_cast<double>(s.tq < s.tk ? s.tq : s.tk);  // rows i < tk see i + 1 keys
  return full * (full + 1) / 2 + static_cast<double>(s.tq > s.tk ? s.tq - s.tk : 0) * s.tk;
}

// One fused attention kernel: a block of 16 rows reads the other side once per block, tile by
// tile; each pair costs its dot products and axpys (2 FLOPs a multiply-add) and an exp.
KernelCost attention_cost(const std::string& k, const TjAttentionShape& s) {
  constexpr double f = 4, rows_per_block = 16;  // TJ_ATTN_ROWS
  const double pairs = s.batches * attention_pairs(s), d = static_cast<double>(s.d), dv = static_cast<double>(s.dv);
  const double b = static_cast<double>(s.batches), tq = static_cast<double>(s.tq), tk = static_cast<double>(s.tk);
  const double q_blocks = std::ceil(tq / rows_per_block), k_blocks = std::ceil(tk / rows_per_block);
  if (k == "tj_attention")  // q read, k and v once per query block, the packed output written
    return {f * b * (tq * d + q_blocks * tk * (d + dv) + tq * (dv + 1)), pairs * (2 * d + 2 * dv + 4)};
  if (k == "tj_attention_grad_q")  // q, out, d out read and dq written; k and v per query block
    return {f * b * (2 * tq * d + 2 * tq * (dv + 1) + q_blocks * tk * (d + dv)), pairs * (4 * d + 2 * dv + 6)};
  // grad_kv: k, v read and dk, dv written; q, d out and out's statistics per key block
  return {f * b * (2 * tk * (d + dv) + k_blocks * tq * (d + 2 * (dv + 1))), pairs * (4 * d + 4 * dv + 6)};
}

// The fused layer norm's kernels: each reads its rows from memory once (the statistics'
// second pass and the output's reread hit the cache) and writes its result once.
KernelCost layer_norm_cost(const std::string& k, const TjNormShape& s) {
  constexpr double f = 4;
  const double elements = static_cast<double>(s.rows) * s.n, n = static_cast<double>(s.n);
  const double width = s.rms ? n : 2 * n;
  if (k == "tj_layer_norm")  // x, gain (and bias) read, y written; per element 3 for the
    return {f * (2 * elements + width), elements * 10};  // statistics, 4 for the output
  if (k == "tj_layer_norm_grad_input")  // x, dy read, dx written
    return {f * (3 * elements + n), elements * 17};
  // the partials: x and dy read, one row of partials written per 64 rows
  return {f * (2 * elements + std::ceil(static_cast<double>(s.rows) / 64) * width), elements * 10};
}

// The implicit-GEMM convolutions (conv_kernels.cu): the image, the filter and the output each
// read or written once (the tiles' rereads of the image's patches are the cache's), the filter
// gradient's slices each writing a partial product; a multiply-add (2 FLOPs) per product term,
// the data gradient's terms the stride does not divide included (its kernel multiplies them by 0).
KernelCost implicit_gemm_cost(const std::string& k, const TjConvShape& g, void** params) {
  constexpr double f = 4;
  const double image = static_cast<double>(g.n) * g.c * g.h * g.w, out = static_cast<double>(g.n) * g.o * g.oh * g.ow;
  const double filter = static_cast<double>(g.o) * g.c * g.kh * g.kw;
  if (k == "tj_conv2d_implicit") return {f * (image + filter + out), 2 * out * g.c * g.kh * g.kw};
  if (k == "tj_conv2d_grad_input_implicit") return {f * (out + filter + image), 2 * image * g.o * g.kh * g.kw};
  const double slices = static_cast<double>(param<long long>(params, 4));
  return {f * (image + out + slices * filter), 2 * filter * g.n * g.oh * g.ow};
}

}  // namespace

KernelCost library_kernel_cost(const std::string& k, void** params) {
  constexpr double f = 4;  // the library kernels' elements are 4 bytes, but the 16-bit pools'
  if (k.starts_with("tj_conv2d") && k.ends_with("_implicit"))
    return implicit_gemm_cost(k, param<TjConvShape>(params, 3), params);
  // The max pools of 16-bit tensors (tj_max_pool2d_bf16, ..._grad_f16): 2 bytes an element.
  const bool half = k.ends_with("_bf16") || k.ends_with("_f16");
  const std::string pool = half ? k.substr(0, k.rfind('_')) : k;
  const double e = half ? 2 : f;
  if (pool == "tj_max_pool2d" || k == "tj_avg_pool2d") {
    const auto& s = param<TjPoolShape>(params, 2);
    return {e * static_cast<double>(s.planes) * (s.h * s.w + s.oh * s.ow), 0};
  }
  if (pool == "tj_max_pool2d_grad") {  // reads x and dy, writes dx
    const auto& s = param<TjPoolShape>(params, 3);
    return {e * static_cast<double>(s.planes) * (2 * s.h * s.w + s.oh * s.ow), 0};
  }
  if (k == "tj_avg_pool2d_grad") {
    const auto& s = param<TjPoolShape>(params, 2);
    return {f * static_cast<double>(s.planes) * (s.h * s.w + s.oh * s.ow), 0};
  }
  if (k == "tj_one_hot") {
    const double count = static_cast<double>(param<long long>(params, 2)), depth = static_cast<double>(param<long long>(params, 3));
    return {f * (count + count * depth), 0};
  }
  if (k == "tj_argmax") {
    const double outer = static_cast<double>(param<long long>(params, 2)), n = static_cast<double>(param<long long>(params, 3)),
                 inner = static_cast<double>(param<long long>(params, 4));
    return {f * (outer * n * inner + outer * inner), 0};
  }
  if (k == "tj_gather") {  // reads an index and an element, writes one, per output
    const double n = static_cast<double>(param<long long>(params, 3)) * param<long long>(params, 5) *
                     param<long long>(params, 6);
    return {f * 3 * n, 0};
  }
  if (k == "tj_gather_grad") {  // per (column, index): reads the index and dy, adds into the table
    const double n = static_cast<double>(param<long long>(params, 3)) * param<long long>(params, 5) *
                     param<long long>(params, 6);
    return {f * 4 * n, n};
  }
  if (k == "tj_combine_rows_links") {  // the indices read once from memory (the scans hit the cache), two ints written each
    const double count = static_cast<double>(param<long long>(params, 3));
    return {f * 3 * count, 0};
  }
  if (k == "tj_combine_rows_sum") {  // per element: its links read, the value read and the sum written
    const double n = static_cast<double>(param<long long>(params, 4)) * param<long long>(params, 5);
    return {f * 2 * n + 8 * static_cast<double>(param<long long>(params, 4)), n};
  }
  if (k == "tj_scatter_rows") {  // per element: the index, the row's value read, the table's written
    const double n = static_cast<double>(param<long long>(params, 3)) * param<long long>(params, 5);
    return {f * 3 * n, 0};
  }
  if (k == "tj_copy_words") {  // per word: read and written
    const auto& jobs = param<TjCopyJobs>(params, 0);
    double words = 0;
    for (int j = 0; j < jobs.count; ++j) words += static_cast<double>(jobs.words[j]);
    return {8 * words, 0};
  }
  if (k == "tj_scale") {  // per element: read, multiplied in double, written
    const double n = static_cast<double>(param<long long>(params, 1));
    return {f * 2 * n, n};
  }
  if (k == "tj_attention") return attention_cost(k, param<TjAttentionShape>(params, 4));
  if (k == "tj_attention_grad_q" || k == "tj_attention_grad_kv") return attention_cost(k, param<TjAttentionShape>(params, 6));
  if (k == "tj_layer_norm" || k == "tj_layer_norm_grad_input") return layer_norm_cost(k, param<TjNormShape>(params, 4));
  if (k == "tj_layer_norm_grad_params_partial") return layer_norm_cost(k, param<TjNormShape>(params, 3));
  if (k == "tj_softmax") {  // x read, y written (e written, then reread from cache and scaled)
    const auto& s = param<TjRowsShape>(params, 2);
    return {f * 2 * static_cast<double>(s.rows) * s.n, static_cast<double>(s.rows) * s.n * 6};
  }
  if (k == "tj_softmax_grad") {  // y, dy read, dx written
    const auto& s = param<TjRowsShape>(params, 3);
    return {f * 3 * static_cast<double>(s.rows) * s.n, static_cast<double>(s.rows) * s.n * 4};
  }
  if (k == "tj_layer_norm_grad_params_sum") {  // every block's partial row read once, one row written
    const double blocks = static_cast<double>(param<long long>(params, 2)), width = static_cast<double>(param<long long>(params, 3));
    return {f * (blocks * width + width), blocks * width};
  }
  if (k == "tj_pad") {
    const auto& b = param<TjBox>(params, 2);
    return {f * (box_elements(b.src, b.rank) + box_elements(b.dst, b.rank)), 0};
  }
  if (k == "tj_copy_box") {
    const auto& b = param<TjBox>(params, 2);
    return {f * 2 * box_elements(b.src, b.rank), 0};
  }
  if (k == "tj_matmul_epilogue") {  // reads and writes each element, reads the bias; an add (and a compare) each
    const double rows = static_cast<double>(param<long long>(params, 2));
    const double cols = static_cast<double>(param<long long>(params, 3));
    return {f * (2 * rows * cols + cols), rows * cols};
  }
  if (k == "tj_conv_epilogue") {  // reads and writes each element, reads the bias; an add (and a compare) each
    const double total = static_cast<double>(param<long long>(params, 2));
    const double channels = static_cast<double>(param<long long>(params, 3));
    return {f * (2 * total + channels), total};
  }
  if (k == "tj_sum_slices") {  // reads every slice's part, writes one sum per element; an add per part
    const double slices = static_cast<double>(param<long long>(params, 2)), count = static_cast<double>(param<long long>(params, 3));
    return {f * (slices * count + count), slices * count};
  }
  return {};
}

}  // namespace towerjit::emulator
