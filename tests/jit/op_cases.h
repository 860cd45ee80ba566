// The op set every backend is tested on: one case per elementwise, reduction, layout and
// library op, each a function of x [B,7] and y ([7], or [B,7] when y_batched), with the input
// range the op needs. The CPU JIT tests run every case against the reference interpreter;
// the CUDA compile tests build every case through NVRTC.
#pragma once

#include <functional>
#include <vector>

#include "towerjit.h"

namespace towerjit::testing {

namespace tj = ::towerjit;

struct Case {
  const char* name;
  std::function<Tensor(Tensor x, Tensor y)> build;  // x [B,7], y [7] or [B,7] as declared
  bool y_batched = false;
  double lo = -2, hi = 2;
};

inline const std::vector<Case>& op_cases() {
  static const std::vector<Case> all = {
      {"neg", [](Tensor x, Tensor) { return -x; }},
      {"exp", [](Tensor x, Tensor) { return tj::exp(x); }},
      {"log", [](Tensor x, Tensor) { return tj::log(x); }, false, 0.1, 3},
      {"sqrt", [](Tensor x, Tensor) { return tj::sqrt(x); }, false, 0.1, 3},
      {"rsqrt", [](Tensor x, Tensor) { return tj::rsqrt(x); }, false, 0.1, 3},
      {"abs", [](Tensor x, Tensor) { return tj::abs(x); }},
      {"sign", [](Tensor x, Tensor) { return tj::sign(x); }},
      {"relu", [](Tensor x, Tensor) { return tj::relu(x); }},
      {"sigmoid", [](Tensor x, Tensor) { return tj::sigmoid(x); }},
      {"tanh", [](Tensor x, Tensor) { return tj::tanh(x); }},
      {"erf", [](Tensor x, Tensor) { return tj::erf(x); }},
      {"gelu", [](Tensor x, Tensor) { return tj::gelu(x); }},
      // Its slope (a gelu_grad node) at |x| up to 8: erf's small branch, its tail, past its clamp.
      {"gelu slope", [](Tensor x, Tensor) { return tj::grad(tj::sum(tj::gelu(x * 4)), {x})[0]; }},
      {"softplus", [](Tensor x, Tensor) { return tj::softplus(x * 20); }},
      {"add broadcast", [](Tensor x, Tensor y) { return x + y; }},
      {"sub", [](Tensor x, Tensor y) { return x - y; }, true},
      {"mul", [](Tensor x, Tensor y) { return x * y; }},
      {"div", [](Tensor x, Tensor y) { return x / y; }, false, 0.5, 2},
      {"maximum", [](Tensor x, Tensor y) { return tj::maximum(x, y); }, true},
      {"minimum", [](Tensor x, Tensor y) { return tj::minimum(x, y); }},
      {"pow", [](Tensor x, Tensor y) { return tj::pow(x, y); }, false, 0.5, 2},
      {"comparisons", [](Tensor x, Tensor y) { return (x < y) + 2 * (x <= y) + 4 * (x > y) + 8 * (x >= y) + 16 * (x == x) + 32 * (x != y); }},
      {"where", [](Tensor x, Tensor y) { return tj::where(x > 0, x, y * 3); }},
      {"cast round trip", [](Tensor x, Tensor) { return tj::cast(tj::cast(x * 10, tj::DType::i32), tj::DType::f32); }},
      {"sum all", [](Tensor x, Tensor) { return tj::sum(x); }},
      {"sum rows", [](Tensor x, Tensor) { return tj::sum(x, {1}); }},
      {"sum batch keepdims", [](Tensor x, Tensor) { return tj::sum(x, {0}, true); }},
      {"mean batch", [](Tensor x, Tensor) { return tj::mean(x * x, {0}); }},
      {"mean all", [](Tensor x, Tensor) { return tj::mean(x); }},
      {"max rows", [](Tensor x, Tensor) { return tj::max(x, {-1}, true); }},
      {"max batch", [](Tensor x, Tensor) { return tj::max(x, {0}); }},
      {"logsumexp rows", [](Tensor x, Tensor) { return tj::logsumexp(x * 20, {-1}, true); }},
      {"logsumexp batch", [](Tensor x, Tensor y) { return tj::logsumexp(x * y * 30, {0}); }, true},
      {"logsumexp all", [](Tensor x, Tensor) { return tj::logsumexp(x); }},
      // Sibling reductions share a kernel, except the last: it reads the sum of the second.
      {"sibling reductions", [](Tensor x, Tensor) { return tj::max(x, {1}) + tj::sum(x, {1}) + tj::logsumexp(x, {1}) + tj::sum(x * tj::sum(x, {1}, true), {1}); }},
      {"sibling column reductions", [](Tensor x, Tensor y) { return tj::logsumexp(x, {0}) - tj::mean(x * y, {0}) + tj::max(y, {0}); }, true},
      {"transpose", [](Tensor x, Tensor) { return tj::transpose(x) * 2; }},
      {"reshape", [](Tensor x, Tensor) { return tj::reshape(x + 1, {kBatch, 7, 1}); }},
      {"broadcast_to", [](Tensor, Tensor y) { return tj::broadcast_to(y, {3, 7}); }},
      {"slice", [](Tensor x, Tensor) { return tj::slice(x, {0, 2}, {kBatch, 6}) + 1; }},
      {"pad", [](Tensor x, Tensor) { return tj::pad(x, {0, 1}, {0, 2}); }},
      {"concat", [](Tensor x, Tensor y) { return tj::concat({x, y * 2}, 1); }, true},
      {"split", [](Tensor x, Tensor) { auto p = tj::split(x, std::vector<int64_t>{3, 4}, 1); return tj::concat({p[1], p[0]}, 1); }},
      {"matmul", [](Tensor x, Tensor y) { return tj::matmul(x, tj::reshape(y, {7, 1})); }},
      {"matmul transposed", [](Tensor x, Tensor y) { return tj::matmul(tj::transpose(x), y); }, true},
      {"batched matmul", [](Tensor x, Tensor) { auto a = tj::reshape(x, {kBatch, 7, 1}); return tj::matmul(a, tj::transpose(a, {0, 2, 1})); }},
      {"argmax", [](Tensor x, Tensor) { return tj::cast(tj::argmax(x, 1), tj::DType::f32); }},
      {"softmax", [](Tensor x, Tensor) { return tj::softmax(x * 3); }},
      {"log_softmax", [](Tensor x, Tensor) { return tj::log_softmax(x * 3, 0); }},
      {"soft-label cross entropy", [](Tensor x, Tensor y) { return tj::softmax_cross_entropy(x, tj::softmax(y)); }, true},
      {"l2_loss", [](Tensor x, Tensor y) { return tj::l2_loss(std::vector<Tensor>{x, y}); }},
  };
  return all;
}

}  // namespace towerjit::testing
