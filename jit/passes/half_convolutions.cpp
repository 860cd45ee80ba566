#include "jit/passes/half_convolutions.h"

#include "dsl/error.h"

namespace towerjit {

Rewritten half_conv_operands(const Graph& graph, DType dtype) {
  internal_check(is_half_float(dtype)) << "half_conv_operands to " << dtype_name(dtype);
  return rewrite_graph(graph, [dtype](Node n, Graph& out) {
    const bool conv = n.op == Op::Conv2D || n.op == Op::Conv2DGradInput || n.op == Op::Conv2DGradFilter;
    const bool max_pool = n.op == Op::MaxPool2D || n.op == Op::MaxPool2DGrad;
    if (!(conv || max_pool) || out.node(n.inputs[0]).dtype != DType::f32) return out.add(std::move(n));
    // The casts keep the convolution's location and scope: a dump names the line of the layer.
    const Node like = n;
    auto cast = [&](int from, DType to) {
      return out.add(Node{.op = Op::Cast, .inputs = {from}, .shape = out.node(from).shape, .dtype = to, .attrs = {},
                          .loc = like.loc, .stack = like.stack, .scope = like.scope, .grad_of = like.grad_of});
    };
    for (int& in : n.inputs) in = cast(in, dtype);
    n.dtype = dtype;
    return cast(out.add(std::move(n)), DType::f32);
  });
}

}  // namespace towerjit
