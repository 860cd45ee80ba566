// Batch norm in inference, recognised in the graph so the ONNX file holds one
// BatchNormalization node where towerjit's graph holds its arithmetic. batch_norm()
// (dsl/layers.cpp) builds, for the inference phase,
//   add(mul(mul(gamma, sub(x, mean)), rsqrt(add(variance, epsilon))), beta)
// with gamma, beta, mean and variance [C] variables reshaped to broadcast along x's axis 1; the
// same expression written by hand matches too, and means the same.
#pragma once

#include <optional>

#include "dsl/graph.h"

namespace towerjit::detail {

struct BatchNormMatch {
  int x = -1;                                        // the normalised input, [N, C, ...]
  int gamma = -1, beta = -1, mean = -1, variance = -1;  // Variable nodes, each [C]
  double epsilon = 0;
};

// The batch norm whose last node is `id`, or nullopt: any other node, or batch norm along an
// axis other than 1 (ONNX's BatchNormalization normalises axis 1 only; the arithmetic is then
// written as it is).
std::optional<BatchNormMatch> match_batch_norm(const Graph& graph, int id);

}  // namespace towerjit::detail
