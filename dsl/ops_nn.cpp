// Neural-network ops. softmax, log_softmax and softmax_cross_entropy are composites of
// primitives (logsumexp is the one row reduction they share), so autodiff and the backends need
// no rules of their own for them and fusion sees the elementwise parts; every node they build
// carries the user's location.
#include "dsl/ops_internal.h"

namespace towerjit {

using namespace detail;

namespace {

Graph& graph_of_two(const Tensor& a, const Tensor& b, const char* op, Loc loc) {
  Operand oa(a, loc), ob(b, loc);
  return graph_of({&oa, &ob}, op, loc);
}

// "f32[B,784]": a type without the op name, for messages that put two side by side.
std::string type_str(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + t.shape().str();
}
std::string dim_str(int64_t d) { return d == kBatch ? "B" : std::to_string(d); }

Graph& graph_of_one(const Tensor& x, const char* op, Loc loc) {
  Operand o(x, loc);
  return graph_of({&o}, op, loc);
}


// Spatial and channel dimensions are compiled into the kernels' loop bounds, so only N may be B.
void require_static(const Tensor& x, int from_axis, const char* what, const char* op, Loc loc) {
  for (int i = from_axis; i < x.rank(); ++i)
    user_check(x.shape()[i] != kBatch, loc)
        << op << ": axis " << i << " of " << what << " " << x.describe() << in_scope(x.graph())
        << " is the batch dimension B; only N (axis 0 of the input) may be B";
}

void require_nchw(const Tensor& x, const char* op, Loc loc) {
  user_check(x.rank() == 4, loc) << op << ": expects an NCHW input of rank 4 but got "
                                 << x.describe() << in_scope(x.graph())
                                 << "; reshape it to [N,C,H,W]";
  require_f32(x, op, loc);
  require_static(x, 1, "the input", op, loc);
}

// (size + 2 pad - kernel) / stride + 1, checked to leave at least one output position. The
// explicit check matters: C++ division truncates toward zero, which would turn a small negative
// numerator into a valid-looking size.
int64_t window_out(int64_t size, int kernel, int stride, int pad, const char* axis,
                   const Tensor& x, const char* op, Loc loc) {
  const int64_t span = size + 2 * pad - kernel;
  user_check(span >= 0, loc) << op << ": the " << kernel << "-wide window does not fit " << axis
                             << " = " << size << " of " << x.describe() << " with padding "
                             << pad << in_scope(x.graph())
                             << "; use a smaller kernel or more padding";
  return span / stride + 1;
}

Tensor pool(Op op, const char* name, Tensor x, Pool2DOptions o, Loc loc) {
  Graph& g = graph_of_one(x, name, loc);
  require_nchw(x, name, loc);
  const int stride = o.stride == 0 ? o.kernel : o.stride;
  user_check(o.kernel >= 1 && stride >= 1 && o.pad >= 0, loc)
      << name << ": kernel " << o.kernel << ", stride " << o.stride << ", pad " << o.pad
      << in_scope(g) << " are invalid; need kernel >= 1, stride >= 0 (0: the kernel) and pad >= 0";
  // As PyTorch: a window lying wholly in the padding would have no elements to pool.
  user_check(2 * o.pad <= o.kernel, loc)
      << name << ": pad " << o.pad << " is more than half the kernel " << o.kernel << in_scope(g)
      << "; use pad <= " << o.kernel / 2;
  const int64_t h = window_out(x.shape()[2], o.kernel, stride, o.pad, "H", x, name, loc);
  const int64_t w = window_out(x.shape()[3], o.kernel, stride, o.pad, "W", x, name, loc);
  Attrs attrs;
  attrs.kernel[0] = attrs.kernel[1] = o.kernel;
  attrs.stride[0] = attrs.stride[1] = stride;
  attrs.pad[0] = attrs.pad[1] = o.pad;
  const Shape shape{x.shape()[0], x.shape()[1], h, w};
  return make(g, op, {x.id()}, shape, DType::f32, attrs, loc);
}

}  // namespace

Tensor matmul(Tensor a, Tensor b, Loc loc) {
  Graph& g = graph_of_two(a, b, "matmul", loc);
  user_check(a.rank() >= 2 && b.rank() >= 2, loc)
      << "matmul: expects operands of rank 2 or more but got " << a.describe() << " x "
      << b.describe() << in_scope(g) << "; reshape a vector to [1,K] or [K,1]";
  // f32 x f32, or two bf16 or two f16 operands multiplied with an f32 accumulator.
  user_check(a.dtype() != DType::i32 && a.dtype() == b.dtype(), loc)
      << "matmul: operands " << a.describe() << " x " << b.describe() << in_scope(g)
      << " must both be f32, both bf16 or both f16 (the result is f32); convert one with cast(x, DType::"
      << dtype_name(a.dtype() == DType::i32 ? b.dtype() == DType::i32 ? DType::f32 : b.dtype() : a.dtype())
      << ")";
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  const int64_t m = sa[sa.rank() - 2], k = sa[sa.rank() - 1];
  const int64_t kb = sb[sb.rank() - 2], n = sb[sb.rank() - 1];
  if (k != kb) {
    const std::string fix = k == n ? "matmul(a, transpose(b))"
                                   : "a right operand of shape " + Shape{k, n}.str();
    user_check(false, loc) << "matmul: inner dimensions differ: " << type_str(a) << " x "
                           << type_str(b) << " (" << dim_str(k) << " vs " << dim_str(kb) << ")"
                           << in_scope(g)
                           << ". The last dimension of a must equal the second-to-last of b; "
                           << "did you mean " << fix << "?";
  }
  const Shape lead_a(std::vector<int64_t>(sa.dims().begin(), sa.dims().end() - 2));
  const Shape lead_b(std::vector<int64_t>(sb.dims().begin(), sb.dims().end() - 2));
  auto lead = broadcast_shapes(lead_a, lead_b);
  user_check(lead.has_value(), loc)
      << "matmul: batch dimensions " << lead_a.str() << " and " << lead_b.str() << " of "
      << a.describe() << " x " << b.describe() << in_scope(g)
      << " do not broadcast; they must match or be 1 (numpy rules)";
  std::vector<int64_t> dims = lead->dims();
  dims.push_back(m);
  dims.push_back(n);
  return make(g, Op::MatMul, {a.id(), b.id()}, Shape(std::move(dims)), DType::f32, {}, loc);
}

Tensor one_hot(Tensor indices, int64_t depth, Loc loc) {
  Graph& g = graph_of_one(indices, "one_hot", loc);
  user_check(indices.dtype() == DType::i32, loc)
      << "one_hot: expects i32 class indices but got " << indices.describe() << in_scope(g)
      << "; convert them with cast(x, DType::i32)";
  user_check(depth > 0, loc) << "one_hot: depth " << depth << in_scope(g)
                             << " must be positive (the number of classes)";
  std::vector<int64_t> dims = indices.shape().dims();
  dims.push_back(depth);
  Attrs attrs;
  attrs.depth = depth;
  attrs.name = source_input(g, indices.id());
  return make(g, Op::OneHot, {indices.id()}, Shape(std::move(dims)), DType::f32, attrs, loc);
}

Tensor argmax(Tensor x, int axis, Loc loc) {
  Graph& g = graph_of_one(x, "argmax", loc);
  Attrs attrs;
  attrs.axis = one_axis(axis, x, "argmax", loc);
  std::vector<int64_t> dims = x.shape().dims();
  dims.erase(dims.begin() + attrs.axis);
  return make(g, Op::ArgMax, {x.id()}, Shape(std::move(dims)), DType::i32, attrs, loc);
}

Tensor softmax(Tensor x, int axis, Loc loc) { return softmax(x, SoftmaxOptions{.axis = axis}, loc); }

Tensor softmax(Tensor x, SoftmaxOptions options, Loc loc) {
  Graph& g = graph_of_one(x, "softmax", loc);
  require_f32(x, "softmax", loc);
  const int a = one_axis(options.axis, x, "softmax", loc);
  if (options.fused && a == x.rank() - 1)
    return make(g, Op::Softmax, {x.id()}, x.shape(), DType::f32, Attrs{}, loc);
  // exp(x - logsumexp(x)): one row reduction and one elementwise pass, where max, exp-sum and
  // divide would take three; the reduction's running maximum keeps exp() finite.
  return exp(sub(x, logsumexp(x, {a}, true, loc), loc), loc);
}

Tensor log_softmax(Tensor x, int axis, Loc loc) {
  graph_of_one(x, "log_softmax", loc);
  require_f32(x, "log_softmax", loc);
  const int a = one_axis(axis, x, "log_softmax", loc);
  return sub(x, logsumexp(x, {a}, true, loc), loc);
}

Tensor softmax_cross_entropy(Tensor logits, Tensor labels, Loc loc) {
  Graph& g = graph_of_two(logits, labels, "softmax_cross_entropy", loc);
  require_f32(logits, "softmax_cross_entropy", loc);
  user_check(logits.rank() >= 1 && logits.shape()[logits.rank() - 1] != kBatch, loc)
      << "softmax_cross_entropy: logits " << logits.describe() << in_scope(g)
      << " need a last axis of classes with a fixed size, e.g. [B,10]";
  const int64_t classes = logits.shape()[logits.rank() - 1];
  std::vector<int64_t> dims = logits.shape().dims();
  dims.pop_back();
  const Shape index_shape(dims);
  const bool indices = labels.dtype() == DType::i32;
  user_check(indices || labels.shape() != index_shape, loc)
      << "softmax_cross_entropy: labels " << labels.describe() << " have the shape of class indices for logits "
      << logits.describe() << in_scope(g) << " but are " << dtype_name(labels.dtype())
      << "; declare the label input DType::i32 (input(\"label\", {kBatch}, DType::i32)) or cast the labels with "
      << "cast(labels, DType::i32); f32 labels are probabilities of shape " << logits.shape().str();
  const Shape& want = indices ? index_shape : logits.shape();
  user_check(labels.shape() == want, loc)
      << "softmax_cross_entropy: labels " << labels.describe() << " do not fit logits "
      << logits.describe() << in_scope(g) << "; i32 class labels need shape "
      << index_shape.str() << " (the logits' shape without the class axis), f32 probabilities "
      << "shape " << logits.shape().str() << (indices ? "; reshape the labels to " : "")
      << (indices ? index_shape.str() : "");
  Tensor p = indices ? one_hot(labels, classes, loc) : labels;
  if (!indices) return neg(sum(mul(p, log_softmax(logits, -1, loc), loc), {-1}, false, loc), loc);
  // A one-hot row sums to 1, so -sum(p * (x - lse)) = lse - sum(p * x): two sibling reductions
  // of the logits, which fusion computes in one kernel. In this form the gradient, softmax(x) - p
  // times the upstream gradient, is elementwise (no row sum of p), so it fuses into whatever
  // consumes it (a dense layer's bias-gradient sum).
  const int last = logits.rank() - 1;
  Tensor lse = logsumexp(logits, {last}, false, loc);  // first: the kernel is named after it
  Tensor picked = sum(mul(p, logits, loc), {last}, false, loc);
  return sub(lse, picked, loc);
}

Tensor conv2d(Tensor x, Tensor w, Conv2DOptions o, Loc loc) {
  Graph& g = graph_of_two(x, w, "conv2d", loc);
  require_nchw(x, "conv2d", loc);
  user_check(w.rank() == 4, loc) << "conv2d: expects a filter [O,C,KH,KW] of rank 4 but got "
                                 << w.describe() << in_scope(g);
  require_f32(w, "conv2d", loc);
  require_static(w, 0, "the filter", "conv2d", loc);
  user_check(x.shape()[1] == w.shape()[1], loc)
      << "conv2d: channels differ: input " << x.describe() << " has C = " << x.shape()[1]
      << " but filter " << w.describe() << " expects C = " << w.shape()[1] << in_scope(g)
      << "; the filter must be [O," << x.shape()[1] << ",KH,KW]";
  user_check(o.stride >= 1 && o.pad >= 0, loc)
      << "conv2d: stride " << o.stride << " and pad " << o.pad << in_scope(g)
      << " are invalid; need stride >= 1 and pad >= 0";
  const int kh = static_cast<int>(w.shape()[2]), kw = static_cast<int>(w.shape()[3]);
  const int64_t h = window_out(x.shape()[2], kh, o.stride, o.pad, "H", x, "conv2d", loc);
  const int64_t wo = window_out(x.shape()[3], kw, o.stride, o.pad, "W", x, "conv2d", loc);
  Attrs attrs;
  attrs.kernel[0] = kh;
  attrs.kernel[1] = kw;
  attrs.stride[0] = attrs.stride[1] = o.stride;
  attrs.pad[0] = attrs.pad[1] = o.pad;
  const Shape shape{x.shape()[0], w.shape()[0], h, wo};
  return make(g, Op::Conv2D, {x.id(), w.id()}, shape, DType::f32, attrs, loc);
}

Tensor max_pool2d(Tensor x, Pool2DOptions options, Loc loc) {
  return pool(Op::MaxPool2D, "max_pool2d", x, options, loc);
}

Tensor avg_pool2d(Tensor x, Pool2DOptions options, Loc loc) {
  return pool(Op::AvgPool2D, "avg_pool2d", x, options, loc);
}

Tensor random_uniform_like(Tensor like, uint64_t seed, Loc loc) {
  Graph& g = graph_of_one(like, "random_uniform_like", loc);
  Attrs attrs;
  attrs.seed = seed;
  return make(g, Op::RandomUniform, {like.id()}, like.shape(), DType::f32, attrs, loc);
}

Tensor assign(Tensor variable, Tensor value, Loc loc) {
  Graph& g = graph_of_two(variable, value, "assign", loc);
  user_check(variable.node().op == Op::Variable, loc)
      << "assign: the target must be a variable but got " << variable.describe() << in_scope(g)
      << "; assign to the tensor variable() returned, not to a value computed from it";
  user_check(value.shape() == variable.shape() && value.dtype() == variable.dtype(), loc)
      << "assign: cannot assign " << value.describe() << " to variable \""
      << variable.node().attrs.name << "\" of " << dtype_name(variable.dtype())
      << variable.shape().str() << in_scope(g)
      << "; the value must have exactly the variable's shape and dtype (use reshape(), "
      << "broadcast_to() or cast())";
  Tensor t = make(g, Op::Assign, {variable.id(), value.id()}, variable.shape(), variable.dtype(),
                  {}, loc);
  g.update_ops.push_back(t.id());
  return t;
}

}  // namespace towerjit
