// Layers: each opens VariableScope(name) with the enclosing reuse, gets its variables there and
// builds its expression from public ops, so autodiff and the backends see nothing special.
#include "dsl/layers.h"

#include <cmath>

#include "dsl/ops_internal.h"
#include "dsl/phase.h"

namespace towerjit {

using detail::in_scope;

namespace {

// Numbers in layer expressions are built with Operand(v, loc), so their constant nodes carry
// the user's line rather than this file's.

// The input checks every layer shares: a valid f32 tensor and a non-empty name.
Graph& layer_graph(const Tensor& x, const std::string& layer, const std::string& name, Loc loc) {
  user_check(x.valid(), loc) << layer << " \"" << name << "\": the input is an empty tensor; "
                             << "build it with an op (input(), another layer) first";
  user_check(!name.empty(), loc) << layer << ": the name is empty" << in_scope(x.graph())
                                 << "; layers need a name to scope their variables, e.g. \"fc1\"";
  detail::require_f32(x, layer.c_str(), loc);
  return x.graph();
}

// Adds weight_decay * l2_loss(kernel) once per variable: only the build that created the kernel
// adds it, so towers sharing the kernel do not count it N times.
void add_weight_decay(const Tensor& kernel, bool created, const std::optional<double>& decay,
                      Loc loc) {
  if (!decay || !created) return;
  add_regularization_loss(mul(l2_loss(kernel, loc), Operand(*decay, loc), loc), loc);
}

Initializer ones() {
  Initializer init;
  init.kind = Initializer::Kind::constant;
  init.a = 1.0;
  return init;
}

}  // namespace

Tensor dense(Tensor x, int64_t units, const std::string& name, DenseOptions options, Loc loc) {
  Graph& g = layer_graph(x, "dense", name, loc);
  user_check(x.rank() >= 1, loc) << "dense \"" << name << "\": expects an input with a feature "
                                 << "axis but got the scalar " << x.describe() << in_scope(g)
                                 << "; reshape it to [B, features]";
  const int64_t in = x.shape()[x.rank() - 1];
  user_check(in != kBatch, loc)
      << "dense \"" << name << "\": the last axis of " << x.describe() << in_scope(g)
      << " is the batch dimension B, but it is the feature axis and sizes the kernel; "
         "put the batch first, e.g. transpose(x)";
  user_check(units > 0, loc) << "dense \"" << name << "\": units must be positive but is "
                             << units << in_scope(g);
  GraphScope use(g);
  VariableScope scope(name);
  const size_t before = g.variables().size();
  Tensor kernel = variable("kernel", {in, units}, {.init = options.kernel_init}, loc);
  add_weight_decay(kernel, g.variables().size() > before, options.weight_decay, loc);
  Tensor y;
  if (x.rank() == 1) {  // [in] -> [1, in] -> [1, units] -> [units]
    y = reshape(matmul(reshape(x, {1, in}, loc), kernel, loc), {units}, loc);
  } else {  // [..., in] x [in, units]: matmul broadcasts the kernel over the leading axes
    y = matmul(x, kernel, loc);
  }
  if (!options.use_bias) return y;
  Tensor bias = variable("bias", {units}, {.init = options.bias_init}, loc);
  return add(y, bias, loc);
}

Tensor conv2d(Tensor x, int64_t filters, int kernel_size, const std::string& name,
              Conv2DLayerOptions options, Loc loc) {
  Graph& g = layer_graph(x, "conv2d", name, loc);
  user_check(x.rank() == 4, loc) << "conv2d \"" << name << "\": expects x as [N, C, H, W] "
                                 << "(NCHW) but got " << x.describe() << in_scope(g)
                                 << "; reshape the input to 4 axes";
  const int64_t channels = x.shape()[1];
  user_check(channels != kBatch, loc)
      << "conv2d \"" << name << "\": the channel axis (1) of " << x.describe() << in_scope(g)
      << " is the batch dimension B; the layout is NCHW with the batch first";
  user_check(filters > 0 && kernel_size > 0, loc)
      << "conv2d \"" << name << "\": filters (" << filters << ") and kernel_size ("
      << kernel_size << ") must be positive" << in_scope(g);
  GraphScope use(g);
  VariableScope scope(name);
  const size_t before = g.variables().size();
  Tensor kernel = variable("kernel", {filters, channels, kernel_size, kernel_size},
                           {.init = options.kernel_init}, loc);
  add_weight_decay(kernel, g.variables().size() > before, options.weight_decay, loc);
  Tensor y = conv2d(x, kernel, Conv2DOptions{.stride = options.stride, .pad = options.pad}, loc);
  if (!options.use_bias) return y;
  Tensor bias = variable("bias", {filters}, {.init = options.bias_init}, loc);
  return add(y, reshape(bias, {1, filters, 1, 1}, loc), loc);
}

namespace {

// The variables as created ([channels]) and reshaped to broadcast against x (`bshape`).
struct BatchNormVars {
  Tensor moving_mean, moving_variance;   // the variable nodes, for the update ops
  Tensor gamma, beta, mean_b, variance_b;  // reshaped to bshape
};

BatchNormVars batch_norm_variables(int64_t channels, const Shape& bshape, Loc loc) {
  auto get = [&](const char* n, Initializer init, bool trainable) {
    return variable(n, {channels}, {.init = init, .trainable = trainable}, loc);
  };
  BatchNormVars v;
  v.gamma = reshape(get("gamma", ones(), true), bshape, loc);
  v.beta = reshape(get("beta", init::zeros(), true), bshape, loc);
  v.moving_mean = get("moving_mean", init::zeros(), false);
  v.moving_variance = get("moving_variance", ones(), false);
  v.mean_b = reshape(v.moving_mean, bshape, loc);
  v.variance_b = reshape(v.moving_variance, bshape, loc);
  return v;
}

// moving = momentum * moving + (1 - momentum) * stop_gradient(batch), as an update op.
void update_moving(Tensor moving, Tensor batch, double momentum, int64_t channels, Loc loc) {
  Tensor stat = reshape(stop_gradient(batch, loc), {channels}, loc);
  Tensor next = add(mul(moving, Operand(momentum, loc), loc),
                    mul(stat, Operand(1.0 - momentum, loc), loc), loc);
  assign(moving, next, loc);
}

struct Moments {
  Tensor mean, variance;  // keepdims; the variance biased
};

// The batch's per-channel mean and variance of x over `axes` (every axis but the channel's), in
// one pass over x: the channel's first element s (index 0 along every axis of `axes`, the batch
// axis too) is taken out of every element, d = x - s, and the pass makes sum(d) and sum(d^2) as
// sibling sums. Then mean = s + mean(d) and variance = mean(d^2) - mean(d)^2, which loses about
// 1 + (s - mean)^2 / variance of its ulps to cancellation: a few, s being one of the values, and
// at most n (the channel's element count) for an outlier, since (s - mean)^2 <= n * variance;
// mean(x^2) - mean(x)^2 without the shift loses (mean / std)^2, everything once |mean| >> std.
// (PyTorch's kernels use Welford's update for the same reason; two passes, the second over
// x - mean, read x twice.) The variance is held at 0 or more: rounding can take a near-zero
// one below. docs/dsl.md, "Batch-norm statistics in one pass".
Moments batch_moments(Graph& g, Tensor x, const std::vector<int>& axes, Loc loc) {
  // Made here rather than by slice(): a slice of the batch axis is no user op (towers split the
  // batch), and this one has no gradient to take (stop_gradient; variance and mean do not
  // depend on s).
  std::vector<int64_t> begin(x.rank(), 0), end = x.shape().dims(), dims = end;
  for (int a : axes) end[a] = dims[a] = 1;
  Attrs attrs;
  attrs.begin = std::move(begin);
  attrs.end = std::move(end);
  Tensor s = stop_gradient(detail::make(g, Op::Slice, {x.id()}, Shape(std::move(dims)), x.dtype(), attrs, loc), loc);
  Tensor d = sub(x, s, loc);
  Tensor mean_d = mean(d, axes, true, loc);
  Tensor variance = sub(mean(mul(d, d, loc), axes, true, loc), mul(mean_d, mean_d, loc), loc);
  return {add(s, mean_d, loc), maximum(variance, Operand(0.0, loc), loc)};
}

// How a layer that differs in inference is built: fixed to one phase, or both (dsl/phase.h).
enum class Built { training, inference, by_phase };

Tensor build_batch_norm(Tensor x, Built built, const std::string& name, const BatchNormOptions& options,
                        Loc loc) {
  Graph& g = layer_graph(x, "batch_norm", name, loc);
  const auto axis = normalize_axis(options.axis, x.rank());
  user_check(axis.has_value(), loc)
      << "batch_norm \"" << name << "\": axis " << options.axis << " is out of range for "
      << x.describe() << in_scope(g) << "; use 1 for NCHW or [N, features]";
  const int64_t channels = x.shape()[*axis];
  user_check(channels != kBatch, loc)
      << "batch_norm \"" << name << "\": the channel axis " << options.axis << " of "
      << x.describe() << in_scope(g) << " is the batch dimension B; pass the feature axis";
  user_check(options.momentum >= 0 && options.momentum <= 1 && options.epsilon > 0, loc)
      << "batch_norm \"" << name << "\": momentum " << options.momentum << " must be in [0, 1] "
      << "and epsilon " << options.epsilon << " positive" << in_scope(g);
  GraphScope use(g);
  VariableScope scope(name);
  std::vector<int64_t> bdims(x.rank(), 1);
  bdims[*axis] = channels;
  const BatchNormVars v = batch_norm_variables(channels, Shape(bdims), loc);
  auto inference = [&] {
    Tensor inv = rsqrt(add(v.variance_b, Operand(options.epsilon, loc), loc), loc);
    return add(mul(mul(v.gamma, sub(x, v.mean_b, loc), loc), inv, loc), v.beta, loc);
  };
  if (built == Built::inference) return inference();
  std::vector<int> axes;
  for (int i = 0; i < x.rank(); ++i)
    if (i != *axis) axes.push_back(i);
  const auto [batch_mean, batch_var] = batch_moments(g, x, axes, loc);
  Tensor centered = sub(x, batch_mean, loc);
  Tensor inv = rsqrt(add(batch_var, Operand(options.epsilon, loc), loc), loc);
  Tensor y = add(mul(mul(v.gamma, centered, loc), inv, loc), v.beta, loc);
  // The moving variance takes the unbiased estimate var * n / max(n - 1, 1) (PyTorch, TF's
  // fused kernel); n is a Count node because the batch size is only known at run time.
  Attrs count_attrs;
  count_attrs.axes = axes;
  Tensor n = detail::make(g, Op::Count, {x.id()}, Shape{}, DType::f32, count_attrs, loc);
  Tensor n_minus_1 = maximum(sub(n, Operand(1.0, loc), loc), Operand(1.0, loc), loc);
  Tensor unbiased = mul(batch_var, div(n, n_minus_1, loc), loc);
  update_moving(v.moving_mean, batch_mean, options.momentum, channels, loc);
  update_moving(v.moving_variance, unbiased, options.momentum, channels, loc);
  return built == Built::training ? y : by_phase(y, inference(), loc);
}

Tensor build_dropout(Tensor x, double rate, Built built, uint64_t seed, Loc loc) {
  user_check(x.valid(), loc) << "dropout: the input is an empty tensor; build it with an op first";
  Graph& g = x.graph();
  user_check(rate >= 0 && rate < 1, loc)
      << "dropout: rate " << rate << " is outside [0, 1)" << in_scope(g)
      << "; rate is the fraction of elements zeroed, e.g. 0.1 (use rate 0 to disable)";
  detail::require_f32(x, "dropout", loc);
  if (built == Built::inference || rate == 0) return x;
  // The mask's seed: the user's seed, the scope path and how many random nodes this scope
  // already holds. Distinct layers differ; rebuilding the same model gives the same seeds.
  const std::string path = g.scope_path();
  int occurrence = 0;
  for (const Node& n : g.nodes())
    if (n.op == Op::RandomUniform && n.scope == path) ++occurrence;
  const uint64_t key = stable_hash("dropout/" + std::to_string(seed) + "/" + path + "/" +
                                   std::to_string(occurrence));
  Tensor keep = greater_equal(random_uniform_like(x, key, loc), Operand(rate, loc), loc);
  Tensor dropped = mul(mul(x, keep, loc), Operand(1.0 / (1.0 - rate), loc), loc);
  return built == Built::training ? dropped : by_phase(dropped, x, loc);
}

}  // namespace

Tensor batch_norm(Tensor x, const std::string& name, BatchNormOptions options, Loc loc) {
  return build_batch_norm(x, Built::by_phase, name, options, loc);
}

Tensor batch_norm(Tensor x, bool training, const std::string& name, BatchNormOptions options,
                  Loc loc) {
  return build_batch_norm(x, training ? Built::training : Built::inference, name, options, loc);
}

Tensor dropout(Tensor x, double rate, DropoutOptions options, Loc loc) {
  return build_dropout(x, rate, Built::by_phase, options.seed, loc);
}

Tensor dropout(Tensor x, double rate, bool training, uint64_t seed, Loc loc) {
  return build_dropout(x, rate, training ? Built::training : Built::inference, seed, loc);
}

}  // namespace towerjit
