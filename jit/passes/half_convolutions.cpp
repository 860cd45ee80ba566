#include "jit/passes/half_convolutions.h"

#include "dsl/error.h"

namespace towerjit {

Rewritten half_conv_operands(const Graph& graph, DType dtype) {
  internal_check(is_half_float(dtype)) << "half_conv_operands to " << dtype_name(dtype);
  return rewrite_graph(graph, [dtype](Node n, Graph& out) {
    const bool conv = n.op == Op::Conv2D || n.op == Op::Conv2DGradInput || n.op == Op::Conv2DGradFilter;
    if (!conv || out.node(n.inputs[0]).dtype != DType::f32) return out.add(std::move(n));
    for (int& in : n.inputs) {
      // The casts keep the convolution's location and scope: a dump names the line of the layer.
      auto cast = [&](int from, DType to) {
        return out.add(Node{.op = Op::Cast, .inputs = {from}, .shape = out.node(from).shape, .dtype = to, .attrs = {},
                            .loc = n.loc, .stack = n.stack, .scope = n.scope, .grad_of = n.grad_of});
      };
      in = cast(cast(in, dtype), DType::f32);
    }
    return out.add(std::move(n));
  });
}

}  // namespace towerjit
