// Dense layers whose bias add (and ReLU) the fusion pass hands the product as its epilogue
// (jit/passes/matmul_epilogues.h), at odd sizes and batched: the CPU tests
// (tests/jit/test_matmul_epilogues.cpp) and the GPU ones (tests_gpu/test_gpu_matmul_epilogues.cpp)
// run the same graphs against the reference.
#pragma once

#include <string>
#include <vector>

#include "jit_check.h"
#include "towerjit.h"

namespace towerjit::testing {

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

}  // namespace towerjit::testing
