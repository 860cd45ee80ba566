#include "runtime/interop/onnx_batch_norm.h"

namespace towerjit::detail {
namespace {

// The [C] Variable reshaped to `like`'s broadcast shape [1, C, 1, ...], or -1.
int channel_variable(const Graph& g, int id, const Shape& x) {
  const Node& r = g.node(id);
  if (r.op != Op::Reshape || r.shape.rank() != x.rank()) return -1;
  for (int a = 0; a < x.rank(); ++a)
    if (r.shape[a] != (a == 1 ? x[1] : 1)) return -1;
  const Node& v = g.node(r.inputs[0]);
  return v.op == Op::Variable && v.shape == Shape{x[1]} && v.dtype == DType::f32 ? r.inputs[0] : -1;
}

// The two inputs of binary `op` node `id`, when it is one.
bool binary(const Graph& g, int id, Op op, int& a, int& b) {
  const Node& n = g.node(id);
  if (n.op != op) return false;
  a = n.inputs[0];
  b = n.inputs[1];
  return true;
}

}  // namespace

std::optional<BatchNormMatch> match_batch_norm(const Graph& g, int id) {
  int scaled, beta_r, centred_by_gamma, inv, gamma_r, centred, x, mean_r, var_r, eps;
  if (!binary(g, id, Op::Add, scaled, beta_r) || !binary(g, scaled, Op::Mul, centred_by_gamma, inv) ||
      !binary(g, centred_by_gamma, Op::Mul, gamma_r, centred) || !binary(g, centred, Op::Sub, x, mean_r))
    return std::nullopt;
  const Node& r = g.node(inv);
  if (r.op != Op::Rsqrt || !binary(g, r.inputs[0], Op::Add, var_r, eps)) return std::nullopt;
  const Shape& xs = g.node(x).shape;
  const Node& e = g.node(eps);
  if (xs.rank() < 2 || xs[1] == kBatch || g.node(id).shape != xs || g.node(x).dtype != DType::f32 ||
      e.op != Op::Constant || e.shape.static_elements() != 1 || e.shape.has_batch())
    return std::nullopt;
  BatchNormMatch m{.x = x,
                   .gamma = channel_variable(g, gamma_r, xs),
                   .beta = channel_variable(g, beta_r, xs),
                   .mean = channel_variable(g, mean_r, xs),
                   .variance = channel_variable(g, var_r, xs),
                   .epsilon = e.attrs.value};
  if (m.gamma < 0 || m.beta < 0 || m.mean < 0 || m.variance < 0) return std::nullopt;
  return m;
}

}  // namespace towerjit::detail
