// A running error bound (Wilkinson's running error analysis, first order where noted): for
// every node, how far a float32 backend's value may lie from the exact value the interpreter
// computes, given how far its inputs may lie. A bound has two parts: what the inputs' errors
// become through the op (its Lipschitz constant over the inputs' error intervals), and the
// op's own rounding in float32 (u = 2^-24 per rounding; for an n-term sum or dot product in
// any order, Higham's gamma_n = n u / (1 - n u), or beyond 100 terms its probabilistic
// counterpart, about 10 sqrt(n) u: see rounding_gamma). The math library's
// functions (expf, logf, tanhf, erff, powf, log1pf; CUDA's are within 2 ulp) get 4 ulp.
//
// bf16 and f16 round at each cast to them, with their own unit roundoff (2^-8, 2^-11): see
// half_cast_bound. Their products are exact in f32, so a matmul of bf16 or f16 operands
// accumulating in f32 keeps the f32 bound of its (rounded) operands.
//
// Discontinuous ops (comparisons, sign, casts to i32, argmax, the max pool's routing) are
// exact when their inputs' intervals decide them, and otherwise bounded by the largest jump
// their result can make: a test that feeds well-separated values checks them exactly.
#include <cmath>
#include <limits>

#include "dsl/error.h"
#include "dsl/half_float.h"
#include "jit/reference/eval.h"

namespace towerjit::reference {

namespace {

constexpr double kUnitRoundoff = 0x1p-24;
constexpr double kLibmUlps = 4;
// Denormals are flushed to zero (runtime/flush_denormals.h): any rounded result may also be
// off by the smallest normal float.
constexpr double kFlushed = 0x1p-126;
constexpr double kInf = std::numeric_limits<double>::infinity();

// What rounding one f32 result `y` adds, `ulps` roundings of it; i32 results are exact.
double rounding(DType dtype, double y, double ulps = 1) {
  return dtype == DType::f32 ? ulps * kUnitRoundoff * std::fabs(y) + kFlushed : 0;
}

Array abs_of(const Array& a) {
  Array out = a;
  for (double& v : out.data) v = std::fabs(v);
  return out;
}

Array& add_to(Array& into, const Array& more, double scale = 1) {
  internal_check(into.size() == more.size()) << into.shape.str() << " += " << more.shape.str();
  for (int64_t i = 0; i < into.size(); ++i) into[i] += scale * more[i];
  return into;
}

// Evaluates node `a` as op `op` on other inputs (a bound array, absolute values).
Array eval_as(const EvalArgs& a, Op op, std::vector<const Array*> inputs,
              Array (*eval)(const EvalArgs&)) {
  Node node = a.node;
  node.op = op;
  EvalArgs args{.node = node, .inputs = std::move(inputs), .shape = a.shape, .batch = a.batch,
                .step = a.step, .tf32_products = a.tf32_products};
  return eval(args);
}

// Whether two values whose errors are at most ea and eb compare the same way as they do now.
bool decided(double a, double b, double ea, double eb) {
  return ea + eb == 0 || std::fabs(a - b) > ea + eb;
}

// max |f'(t)| over [x - e, x + e] for an f' that peaks at 0 and falls off on both sides.
template <typename Derivative>
double peak_at_zero_slope(double x, double e, Derivative f) {
  const double nearest = std::fabs(x) <= e ? 0 : std::fabs(x) - e;
  return f(nearest);
}

// A cast to bf16 / f16 of a value the reference holds as x and a backend as x' within e of it.
// Both round to nearest even (the reference rounds too: jit/reference/eval_elementwise.cpp), so
// an exact input (e = 0) rounds to the same bits; otherwise the two may round to neighbours:
// |round(x') - round(x)| <= e + u |x'| + u |x| with the format's unit roundoff u (2^-8 for
// bf16, 2^-11 for f16), plus half a subnormal step on each side, and nothing bounds a value that
// may round to infinity on one side only.
double half_cast_bound(DType t, double x, double e) {
  if (e == 0 || std::isnan(e)) return e;
  const HalfFormat f = half_format(t);
  if (std::fabs(x) + e >= f.max_finite) return kInf;
  const double subnormal_step = std::ldexp(1.0, f.min_exponent - (f.precision - 1));
  return e + unit_roundoff(t) * (2 * std::fabs(x) + e) + subnormal_step;
}

double unary_bound(const Node& node, double x, double e, double y) {
  const double u = kUnitRoundoff;
  const double libm = rounding(node.dtype, y, kLibmUlps);
  switch (node.op) {
    case Op::Neg: case Op::Abs: case Op::Relu: case Op::StopGradient: return e;
    case Op::Sign: return std::fabs((x + e > 0) - (x + e < 0) - ((x - e > 0) - (x - e < 0)));
    case Op::Exp: return std::fabs(y) * std::expm1(e) + libm;
    case Op::Log: return e < std::fabs(x) ? e / (std::fabs(x) - e) + libm : kInf;
    case Op::Sqrt: {
      const double spread = std::max(std::sqrt(x + e) - y, y - std::sqrt(std::max(0.0, x - e)));
      return spread + rounding(node.dtype, y);
    }
    case Op::Rsqrt:  // 1 / sqrt(x): two roundings
      return e < x ? 1 / std::sqrt(x - e) - y + rounding(node.dtype, y, 2) : kInf;
    case Op::Sigmoid: {  // 1 / (1 + exp(-x)): the exp, the add and the divide round
      const double slope = peak_at_zero_slope(x, e, [](double t) {
        const double s = 1 / (1 + std::exp(-t));
        return s * (1 - s);
      });
      return slope * e + rounding(node.dtype, y, kLibmUlps + 2);
    }
    case Op::Tanh:
      return peak_at_zero_slope(x, e, [](double t) { return 1 - std::tanh(t) * std::tanh(t); }) * e + libm;
    case Op::Erf:
      return peak_at_zero_slope(x, e, [](double t) { return 2 / std::sqrt(M_PI) * std::exp(-t * t); }) * e + libm;
    case Op::Gelu:  // x * 0.5 * (1 + erf(x / sqrt 2)): |gelu'| <= 1.13; 1 + erf cancels for x < 0
      return 1.13 * e + (kLibmUlps + 4) * u * (std::fabs(x) + std::fabs(y)) + kFlushed;
    case Op::GeluGrad:  // Phi(x) + x phi(x) <= 1.13: |slope| = phi(x) |2 - x²| <= 2 phi(0) < 0.8
      return 0.8 * e + (kLibmUlps + 4) * u * (1 + std::fabs(x)) + kFlushed;
    case Op::Softplus:  // max(x, 0) + log1p(exp(-|x|)): slope sigmoid(x) <= sigmoid(x + e)
      return e / (1 + std::exp(-(x + e))) + rounding(node.dtype, y, 2 * kLibmUlps + 2);
    case Op::Cast:
      if (node.dtype == DType::i32) return std::fabs(std::trunc(x + e) - std::trunc(x - e));
      if (is_half_float(node.dtype)) return half_cast_bound(node.dtype, x, e);
      return e + rounding(node.dtype, y);
    default: break;
  }
  internal_check(false) << "no error bound for unary op " << op_name(node.op);
  return 0;
}

double pow_bound(const Node& node, double a, double b, double ea, double eb, double y) {
  if (a == 0 && ea == 0) return eb == 0 ? 0 : (b - eb > 0 ? 0 : kInf);
  if (ea >= std::fabs(a)) return kInf;
  // a^b = exp(b log|a|) (up to sign): the log moves by at most this much.
  const double shift = (std::fabs(b) + eb) * ea / (std::fabs(a) - ea) + std::fabs(std::log(std::fabs(a))) * eb;
  return std::fabs(y) * std::expm1(shift) + rounding(node.dtype, y, kLibmUlps);
}

double binary_bound(const Node& node, double a, double b, double ea, double eb, double y) {
  switch (node.op) {
    case Op::Add: case Op::Sub: return ea + eb + rounding(node.dtype, y);
    case Op::Mul: return std::fabs(b) * ea + std::fabs(a) * eb + ea * eb + rounding(node.dtype, y);
    case Op::Div:
      if (node.dtype == DType::i32) return ea + eb == 0 ? 0 : kInf;
      return eb < std::fabs(b) ? (ea + std::fabs(y) * eb) / (std::fabs(b) - eb) + rounding(node.dtype, y) : kInf;
    case Op::Max: case Op::Min: return std::max(ea, eb);
    case Op::Pow: return pow_bound(node, a, b, ea, eb, y);
    case Op::Less: case Op::LessEqual: case Op::Greater: case Op::GreaterEqual:
    case Op::Equal: case Op::NotEqual: return decided(a, b, ea, eb) ? 0 : 1;
    default: break;
  }
  internal_check(false) << "no error bound for binary op " << op_name(node.op);
  return 0;
}

Array elementwise_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, const Array& y) {
  Array out = a.result();
  const bool unary = op_kind(a.node.op) == OpKind::Unary;
  for (int64_t i = 0; i < out.size(); ++i) {
    const std::vector<int64_t> index = unravel(i, out.shape);
    auto at = [&](int k, const Array& arr) { return arr[broadcast_index(a.in(k).shape, index)]; };
    if (unary) {
      out[i] = unary_bound(a.node, a.in(0)[i], (*bounds[0])[i], y[i]);
    } else if (a.node.op == Op::Select) {
      const double ex = at(1, *bounds[1]), ey = at(2, *bounds[2]);
      // An undecided condition may pick either side.
      out[i] = at(0, *bounds[0]) == 0 ? (at(0, a.in(0)) != 0 ? ex : ey)
                                      : std::fabs(at(1, a.in(1)) - at(2, a.in(2))) + std::max(ex, ey);
    } else {
      out[i] = binary_bound(a.node, at(0, a.in(0)), at(1, a.in(1)), at(0, *bounds[0]), at(1, *bounds[1]), y[i]);
    }
  }
  return out;
}

Array reduce_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, const Array& y) {
  const Array& x = a.in(0);
  const double n = static_cast<double>(x.size()) / std::max<int64_t>(1, y.size());
  const Op op = a.node.op;
  if (op == Op::ReduceMax) return eval_as(a, Op::ReduceMax, {bounds[0]}, eval_reduce);
  if (op == Op::ReduceLogSumExp) {
    // The result moves by at most the largest input error (its gradient, softmax, sums to 1).
    // One pass with a running maximum rescales the sum at each new maximum (n exps and
    // products), the exps' arguments x - max are rounded (their weighted error is at most n/e
    // ulps), then a log and an add.
    Array out = eval_as(a, Op::ReduceMax, {bounds[0]}, eval_reduce);
    for (int64_t i = 0; i < out.size(); ++i)
      out[i] += kUnitRoundoff * (n * (kLibmUlps + 4) + 2 * kLibmUlps + 4) + rounding(a.node.dtype, y[i]);
    return out;
  }
  // Sums and means: the inputs' errors add up, and the sum of n terms rounds by gamma_n of
  // the sum of magnitudes (a mean divides by n, one more rounding).
  const Array magnitude = abs_of(x);
  Array out = eval_as(a, op, {bounds[0]}, eval_reduce);
  add_to(out, eval_as(a, op, {&magnitude}, eval_reduce), a.node.dtype == DType::f32 ? rounding_gamma(n + 1) : 0);
  for (int64_t i = 0; i < out.size(); ++i) out[i] += rounding(a.node.dtype, y[i]);
  return out;
}

// A product summed over `terms` terms, bilinear in its two inputs (matmul, the convolutions):
// F(|a|, eb) + F(ea, |b|) + F(ea, eb) + gamma_terms F(|a|, |b|).
Array bilinear_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, double terms,
                     Array (*eval)(const EvalArgs&)) {
  const Array ma = abs_of(a.in(0)), mb = abs_of(a.in(1));
  Array out = eval_as(a, a.node.op, {&ma, bounds[1]}, eval);
  add_to(out, eval_as(a, a.node.op, {bounds[0], &mb}, eval));
  add_to(out, eval_as(a, a.node.op, {bounds[0], bounds[1]}, eval));
  add_to(out, eval_as(a, a.node.op, {&ma, &mb}, eval), rounding_gamma(terms));
  for (double& v : out.data) v += terms * kFlushed;
  return out;
}

// The same on TF32 tensor cores: every input is rounded to TF32 first (relative error at most
// 2^-11) and the exact products of the rounded inputs are summed in f32, so with
// s = (1 + 2^-11)^2 (1 + gamma'_terms) the result is within
// s (F(|a|, eb) + F(ea, |b|) + F(ea, eb)) + (s - 1) F(|a|, |b|).
Array tf32_bilinear_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, double terms,
                          Array (*eval)(const EvalArgs&)) {
  const double s = 1 + tf32_dot_gamma(terms);
  const Array ma = abs_of(a.in(0)), mb = abs_of(a.in(1));
  Array out = eval_as(a, a.node.op, {&ma, bounds[1]}, eval);
  for (double& v : out.data) v *= s;
  add_to(out, eval_as(a, a.node.op, {bounds[0], &mb}, eval), s);
  add_to(out, eval_as(a, a.node.op, {bounds[0], bounds[1]}, eval), s);
  add_to(out, eval_as(a, a.node.op, {&ma, &mb}, eval), s - 1);
  for (double& v : out.data) v += terms * kFlushed;
  return out;
}

// A result of bf16 / f16 dtype computed in f32 within `bound` of the exact value, then
// rounded on store as the reference rounds the exact value (a 16-bit convolution): the cast's
// bound (half_cast_bound) at the exact value x. The reference holds y = round(x), so
// |x| <= |y| / (1 - u) with the format's unit roundoff u. f32 results are returned as they are.
Array stored_bound(const EvalArgs& a, Array bound, const Array& y) {
  const DType t = a.node.dtype;
  if (!is_half_float(t)) return bound;
  for (int64_t i = 0; i < bound.size(); ++i)
    bound[i] = half_cast_bound(t, std::fabs(y[i]) / (1 - unit_roundoff(t)), bound[i]);
  return bound;
}

// A product in the mode the backend computes it in: f32, or TF32 tensor cores.
Array product_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, double terms,
                    Array (*eval)(const EvalArgs&)) {
  return a.tf32_products ? tf32_bilinear_bound(a, bounds, terms, eval) : bilinear_bound(a, bounds, terms, eval);
}

// A linear op of one input summing `terms` terms (the average pool and its gradient).
Array linear_bound(const EvalArgs& a, const Array& bound, double terms, Array (*eval)(const EvalArgs&)) {
  const Array magnitude = abs_of(a.in(0));
  Array out = eval_as(a, a.node.op, {&bound}, eval);
  add_to(out, eval_as(a, a.node.op, {&magnitude}, eval), rounding_gamma(terms + 1));
  for (double& v : out.data) v += kFlushed;
  return out;
}

// The bound that moves with the elements, for ops that only move them (and pad with zeros).
Array moved_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, Array (*eval)(const EvalArgs&)) {
  return eval_as(a, a.node.op, bounds, eval);
}

Array one_hot_bound(const EvalArgs& a, const Array& index_bound) {
  Array out = a.result();
  const int64_t depth = out.shape[out.shape.rank() - 1];
  for (int64_t i = 0; i < out.size(); ++i) out[i] = index_bound[i / depth] == 0 ? 0 : 1;
  return out;
}

// An argmax is exact unless a runner-up lies within the errors of the maximum.
Array argmax_bound(const EvalArgs& a, const Array& bound, const Array& y) {
  const Array& x = a.in(0);
  const int axis = normalize_axis(a.node.attrs.axis, x.shape.rank()).value();
  const int64_t len = x.shape[axis];
  int64_t inner = 1;
  for (int d = axis + 1; d < x.shape.rank(); ++d) inner *= x.shape[d];
  Array out = a.result();
  for (int64_t o = 0; o < out.size(); ++o) {
    const int64_t base = (o / inner) * len * inner + o % inner;
    const int64_t best = base + static_cast<int64_t>(y[o]) * inner;
    for (int64_t k = 0; k < len; ++k) {
      const int64_t at = base + k * inner;
      if (at != best && !decided(x[at], x[best], bound[at], bound[best])) out[o] = static_cast<double>(len);
    }
  }
  return out;
}

bool any_nonzero(const Array& bound) {
  for (double e : bound.data)
    if (e != 0) return true;
  return false;
}

// Every element unbounded: an index that might be off could pick another row.
Array unbounded(const EvalArgs& a) {
  Array out = a.result();
  for (double& v : out.data) v = kInf;
  return out;
}

// A gather moves elements: each output's bound is its source's. An index that might differ
// (a computed one with an error) could pick another row: unbounded.
Array gather_bound(const EvalArgs& a, const Array& table_bound, const Array& index_bound) {
  for (double e : index_bound.data)
    if (e != 0) {
      Array out = a.result();
      for (double& v : out.data) v = kInf;
      return out;
    }
  return eval_as(a, Op::Gather, {&table_bound, &a.in(1)}, eval_gather);
}

// A gather's gradient sums, into each row, the slices of dy whose index names it, in index
// order: the moved bounds plus the rounding of an n-term sum, n being how many indices name
// that row (the gradient of ones counts them).
Array gather_grad_bound(const EvalArgs& a, const Array& index_bound, const Array& dy_bound) {
  for (double e : index_bound.data)
    if (e != 0) {
      Array out = a.result();
      for (double& v : out.data) v = kInf;
      return out;
    }
  const Array& indices = a.in(0);
  const Array magnitude = abs_of(a.in(1));
  Array ones = a.in(1);
  for (double& v : ones.data) v = 1;
  Array out = eval_as(a, Op::GatherGrad, {&indices, &dy_bound}, eval_gather_grad);
  const Array mags = eval_as(a, Op::GatherGrad, {&indices, &magnitude}, eval_gather_grad);
  const Array terms = eval_as(a, Op::GatherGrad, {&indices, &ones}, eval_gather_grad);
  for (int64_t i = 0; i < out.size(); ++i)
    if (terms[i] > 0) out[i] += rounding_gamma(terms[i]) * mags[i] + terms[i] * kFlushed;
  return out;
}

// combine_rows sums, at each position, the values sharing its index in index order: the
// bound of gather_grad's row, read at each position.
Array combine_rows_bound(const EvalArgs& a, const Array& index_bound, const Array& values_bound) {
  if (any_nonzero(index_bound)) return unbounded(a);
  const Array& indices = a.in(0);
  const Array magnitude = abs_of(a.in(1));
  Array ones = a.in(1);
  for (double& v : ones.data) v = 1;
  Array out = eval_as(a, Op::CombineRows, {&indices, &values_bound}, eval_combine_rows);
  const Array mags = eval_as(a, Op::CombineRows, {&indices, &magnitude}, eval_combine_rows);
  const Array terms = eval_as(a, Op::CombineRows, {&indices, &ones}, eval_combine_rows);
  for (int64_t i = 0; i < out.size(); ++i)
    if (terms[i] > 0) out[i] += rounding_gamma(terms[i]) * mags[i] + terms[i] * kFlushed;
  return out;
}

// scatter_rows moves elements: the table's bounds with the written rows' bounds in place.
Array scatter_rows_bound(const EvalArgs& a, const std::vector<const Array*>& bounds) {
  if (any_nonzero(*bounds[1])) return unbounded(a);
  return eval_as(a, Op::ScatterRows, {bounds[0], &a.in(1), bounds[2]}, eval_scatter_rows);
}

}  // namespace

double rounding_gamma(double n) {
  const double u = kUnitRoundoff, nu = n * u;
  const double worst = nu < 1 ? nu / (1 - nu) : kInf;
  // Higham & Mary (SIAM J. Sci. Comput. 41(5), 2019, theorem 3.1): with rounding errors
  // independent and of mean zero, an n-term sum or dot product is within
  // exp(lambda sqrt(n) u + n u^2 / (1 - u)) - 1 of its magnitudes, except with probability
  // below 2 n exp(-lambda^2 (1 - u)^2 / 2): 4e-22 n at lambda = 10. Beyond 100 terms this is
  // tighter than the worst case, which grows with n, not sqrt(n), and misses a term counted
  // twice in a long sum.
  const double lambda = 10;
  const double likely = std::expm1(lambda * std::sqrt(n) * u + n * u * u / (1 - u));
  return std::min(worst, likely);
}

double tf32_dot_gamma(double n) {
  // Inputs: TF32 keeps 10 of f32's 23 stored mantissa bits; cuBLAS rounds to nearest (ties
  // away, cvt.rna.tf32.f32), so each input moves by at most 2^-11 of itself, and a product of
  // two by (1 + 2^-11)^2 - 1. The product of two 11-bit significands is exact in f32.
  const double input = (1 + 0x1p-11) * (1 + 0x1p-11);
  // Sums: the tensor cores add in f32 but, as measured by Fasi, Higham, Mikaitis and Pranesh
  // ("Numerical behavior of NVIDIA tensor cores", PeerJ Comput. Sci. 7:e330, 2021), align and
  // normalise by truncation, not round to nearest: a biased error of up to 2^-23 per addition,
  // so the worst case n 2^-23 / (1 - n 2^-23) applies, not the probabilistic sqrt(n) bound.
  const double nu = n * 0x1p-23;
  const double sum = nu < 1 ? nu / (1 - nu) : kInf;
  return input * (1 + sum) - 1;
}

Array float_rounding_bound(const Array& value) {
  Array out(value.shape);
  if (value.dtype != DType::f32) return out;
  for (int64_t i = 0; i < value.size(); ++i)
    out[i] = std::fabs(value[i] - static_cast<double>(static_cast<float>(value[i])));
  return out;
}

Array error_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, const Array& y) {
  const Attrs& at = a.node.attrs;
  switch (a.node.op) {
    case Op::Input: case Op::Variable: case Op::Constant: case Op::Iota: return float_rounding_bound(y);
    case Op::Gather: return gather_bound(a, *bounds[0], *bounds[1]);
    case Op::GatherGrad: return gather_grad_bound(a, *bounds[0], *bounds[1]);
    case Op::CombineRows: return combine_rows_bound(a, *bounds[0], *bounds[1]);
    case Op::ScatterRows: return scatter_rows_bound(a, bounds);
    case Op::Attention: return attention_bound(a, bounds, y);
    case Op::AttentionGradQ: case Op::AttentionGradKV: return attention_grad_bound(a, bounds, y);
    case Op::LayerNorm: case Op::LayerNormGradInput: case Op::LayerNormGradParams:
      return layer_norm_bound(a, bounds, y);
    case Op::Softmax: case Op::SoftmaxGrad: return softmax_bound(a, bounds, y);
    case Op::Count: return Array(a.shape);
    case Op::Select: return elementwise_bound(a, bounds, y);
    case Op::Reshape: return moved_bound(a, bounds, eval_reshape);
    case Op::Transpose: return moved_bound(a, bounds, eval_transpose);
    case Op::BroadcastTo: return moved_bound(a, bounds, eval_broadcast_to);
    case Op::Slice: return moved_bound(a, bounds, eval_slice);
    case Op::Pad: return moved_bound(a, bounds, eval_pad);
    case Op::Concat: return moved_bound(a, bounds, eval_concat);
    case Op::MatMul: {
      const Shape& s = a.in(0).shape;
      const double terms = static_cast<double>(s[s.rank() - 1]);
      return product_bound(a, bounds, terms, eval_matmul);
    }
    // Convolutions are products too: cuDNN runs them on TF32 tensor cores under the same knob.
    case Op::Conv2D: {
      const Shape& w = a.in(1).shape;  // [O, C, KH, KW]
      return stored_bound(a, product_bound(a, bounds, static_cast<double>(w[1] * w[2] * w[3]), eval_conv2d), y);
    }
    case Op::Conv2DGradInput: {
      const Shape& w = a.in(1).shape;
      return stored_bound(a, product_bound(a, bounds, static_cast<double>(w[0] * w[2] * w[3]), eval_conv2d_grad_input),
                          y);
    }
    case Op::Conv2DGradFilter: {
      const Shape& dy = a.in(1).shape;  // [N, O, OH, OW]
      return stored_bound(a, product_bound(a, bounds, static_cast<double>(dy[0] * dy[2] * dy[3]), eval_conv2d_grad_filter),
                          y);
    }
    case Op::MaxPool2D: return moved_bound(a, bounds, eval_max_pool2d);  // the window's largest error
    case Op::MaxPool2DGrad: return stored_bound(a, max_pool2d_grad_bound(a, *bounds[0], *bounds[1]), y);
    case Op::AvgPool2D: return linear_bound(a, *bounds[0], at.kernel[0] * at.kernel[1], eval_avg_pool2d);
    case Op::AvgPool2DGrad: return linear_bound(a, *bounds[0], at.kernel[0] * at.kernel[1], eval_avg_pool2d_grad);
    case Op::OneHot: return one_hot_bound(a, *bounds[0]);
    case Op::ArgMax: return argmax_bound(a, *bounds[0], y);
    case Op::RandomUniform: {
      Array out(a.shape);
      for (int64_t i = 0; i < out.size(); ++i) out[i] = rounding(DType::f32, y[i]);
      return out;
    }
    case Op::Assign: return *bounds[1];
    case Op::AllReduce: case Op::PhaseSelect: return *bounds[0];
    default: break;
  }
  switch (op_kind(a.node.op)) {
    case OpKind::Unary: case OpKind::Binary: return elementwise_bound(a, bounds, y);
    case OpKind::Reduce: return reduce_bound(a, bounds, y);
    default: break;
  }
  internal_check(false) << "no error bound for op " << op_name(a.node.op);
  return {};
}

}  // namespace towerjit::reference
