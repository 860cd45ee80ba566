// Dense layers and convolutions whose bias add (and ReLU) the fusion pass hands the product or
// the convolution as its epilogue (jit/passes/epilogues.h), at odd sizes and batched: the CPU
// tests (tests/jit/test_matmul_epilogues.cpp, test_conv_epilogues.cpp) and the GPU ones
// (tests_gpu/test_gpu_matmul_epilogues.cpp, test_gpu_conv_epilogues.cpp) run the same graphs
// against the reference.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "jit/passes/pipeline.h"
#include "jit_check.h"
#include "towerjit.h"

namespace towerjit::testing {

// The kernel IR CpuProgram would compile for `fetches`, and its count of loop kernels.
inline kir::Program lower(const Graph& g, const std::vector<Tensor>& fetches) {
  std::vector<int> ids;
  for (const Tensor& t : fetches) ids.push_back(t.id());
  return lower_graph(g, ids, {}).program;
}

// The kernel IR a CudaProgram would compile for `fetches`.
inline kir::Program lower_for_gpu(const Graph& g, const std::vector<Tensor>& fetches) {
  std::vector<int> ids;
  for (const Tensor& t : fetches) ids.push_back(t.id());
  return lower_graph_for_gpu(g, ids, {}).program;
}

// Whether two results are the same bits.
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The steps that call library routine `op`.
inline int calls_of(const kir::Program& p, Op op) {
  return static_cast<int>(std::count_if(p.steps.begin(), p.steps.end(), [&](const kir::Step& s) {
    return s.kind == kir::Step::Kind::library && p.calls[s.index].op == op;
  }));
}

inline int kernel_steps(const kir::Program& p) {
  return static_cast<int>(
      std::count_if(p.steps.begin(), p.steps.end(), [](const kir::Step& s) { return s.kind == kir::Step::Kind::kernel; }));
}

struct EpilogueCase {
  Shape x, w;              // the product's operands; the bias is [w's last axis]
  bool relu = false;
  bool bias_first = false;  // b + x w rather than x w + b: the same epilogue
  std::string str() const {
    return std::string(relu ? "relu(" : "(") + x.str() + " @ " + w.str() + (bias_first ? " , bias first)" : " + bias)");
  }
};

// m, k and n of 1, 7 and 127; then batches: one weight for a batch of inputs (folded into
// rows), a weight per batch (strided), and batch axes broadcast against each other (a call per
// matrix).
inline std::vector<EpilogueCase> epilogue_cases() {
  std::vector<EpilogueCase> cases;
  for (int64_t m : {1, 7, 127})
    for (int64_t n : {1, 7, 127})
      for (bool relu : {false, true}) {
        const int64_t k = m == 1 ? 1 : m == 7 ? 127 : 7;  // each of k's sizes once a row count
        cases.push_back({Shape{m, k}, Shape{k, n}, relu, n == 7});
      }
  cases.push_back({Shape{3, 7, 127}, Shape{127, 7}, true});
  cases.push_back({Shape{2, 7, 5}, Shape{2, 5, 127}, true});
  cases.push_back({Shape{2, 1, 7, 7}, Shape{1, 3, 7, 127}, false});
  cases.push_back({Shape{2, 1, 7, 7}, Shape{1, 3, 7, 127}, true});
  return cases;
}

// `c`'s graph in the current scope: inputs "x", "w", "b", fed into `feeds` from `seed`. The
// inputs are centred so that about half the pre-activations are negative (ReLU has work).
inline Tensor epilogue_graph(const EpilogueCase& c, reference::Feeds& feeds, uint32_t seed) {
  const Shape b_shape{c.w[c.w.rank() - 1]};
  const Tensor x = input("x", c.x), w = input("w", c.w), b = input("b", b_shape);
  feeds["x"] = random_array(c.x, seed);
  feeds["w"] = random_array(c.w, seed + 1);
  feeds["b"] = random_array(b_shape, seed + 2);
  const Tensor product = matmul(x, w);
  const Tensor y = c.bias_first ? b + product : product + b;
  return c.relu ? relu(y) : y;
}

// relu(x w + b) with x and w rounded to `t` (bf16 or f16) for the product, as the precision
// policy leaves a layer whose output is fetched: x [7, 127], w [127, 33], b [33].
inline Tensor half_epilogue_graph(DType t, reference::Feeds& feeds, uint32_t seed) {
  const Tensor x = input("x", {7, 127}), w = input("w", {127, 33}), b = input("b", {33});
  feeds["x"] = random_array({7, 127}, seed);
  feeds["w"] = random_array({127, 33}, seed + 1);
  feeds["b"] = random_array({33}, seed + 2);
  return relu(matmul(cast(x, t), cast(w, t)) + b);
}

struct ConvEpilogueCase {
  Shape x;  // [N, C, H, W]
  int64_t filters, kernel;
  int stride, pad;
  bool relu = true;
  bool bias_first = false;  // bias + conv rather than conv + bias: the same epilogue
  std::string str() const {
    return std::string(relu ? "relu(" : "(") + "conv " + x.str() + " -> " + std::to_string(filters) + " filters " +
           std::to_string(kernel) + "x" + std::to_string(kernel) + " stride " + std::to_string(stride) + " pad " +
           std::to_string(pad) + (bias_first ? ", bias first)" : " + bias)");
  }
};

// Each of the CPU's forward paths: the narrow kernels (1 and 3 input channels), the direct ones
// (8 and 16), one image and an odd batch, odd channel counts, a stride, no padding.
inline std::vector<ConvEpilogueCase> conv_epilogue_cases() {
  return {{Shape{1, 1, 7, 7}, 16, 3, 1, 1, true},     {Shape{7, 3, 7, 13}, 5, 3, 2, 1, false},
          {Shape{2, 16, 9, 9}, 16, 3, 1, 1, true},    {Shape{3, 8, 5, 33}, 32, 3, 1, 0, true, true},
          {Shape{7, 5, 7, 7}, 7, 3, 1, 1, true},      {Shape{2, 1, 28, 28}, 16, 3, 1, 1, true}};
}

// `c`'s graph in the current scope: inputs "x", "w" [filters, C, k, k] and "b" [filters] added
// as [1, filters, 1, 1], as the conv2d layer does, fed into `feeds` from `seed`.
inline Tensor conv_epilogue_graph(const ConvEpilogueCase& c, reference::Feeds& feeds, uint32_t seed) {
  const Shape w_shape{c.filters, c.x[1], c.kernel, c.kernel}, b_shape{c.filters};
  const Tensor x = input("x", c.x), w = input("w", w_shape), b = input("b", b_shape);
  feeds["x"] = random_array(c.x, seed);
  feeds["w"] = random_array(w_shape, seed + 1);
  feeds["b"] = random_array(b_shape, seed + 2);
  const Tensor y = conv2d(x, w, {.stride = c.stride, .pad = c.pad});
  const Tensor bias = reshape(b, {1, c.filters, 1, 1});
  const Tensor pre = c.bias_first ? bias + y : y + bias;
  return c.relu ? relu(pre) : pre;
}

}  // namespace towerjit::testing
