// Constants and elementwise ops, in double precision; binary ops and select broadcast as numpy.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "dsl/error.h"
#include "dsl/half_float.h"
#include "jit/reference/eval.h"

namespace towerjit::reference {

namespace {

// i32 values are whole numbers: what storing into an int32 does to a double.
double to_i32(double v) { return std::trunc(v); }

double unary_value(Op op, double x) {
  switch (op) {
    case Op::Neg: return -x;
    case Op::Exp: return std::exp(x);
    case Op::Log: return std::log(x);
    case Op::Sqrt: return std::sqrt(x);
    case Op::Rsqrt: return 1.0 / std::sqrt(x);
    case Op::Abs: return std::fabs(x);
    case Op::Sign: return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
    case Op::Relu: return x > 0 || std::isnan(x) ? x : 0.0;  // NaN stays NaN, as in PyTorch
    case Op::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Op::Tanh: return std::tanh(x);
    case Op::Erf: return std::erf(x);
    case Op::Gelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Op::GeluGrad:  // Phi(x) + x phi(x)
      return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    // log(1 + e^x) = max(x, 0) + log(1 + e^-|x|): exp never overflows.
    case Op::Softplus: return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x)));
    case Op::StopGradient: return x;
    default: break;
  }
  internal_check(false) << op_name(op) << " is not a unary op";
  return 0;
}

double binary_value(Op op, double x, double y, bool integer) {
  switch (op) {
    case Op::Add: return x + y;
    case Op::Sub: return x - y;
    case Op::Mul: return x * y;
    case Op::Div: return integer ? std::trunc(x / y) : x / y;
    // A NaN on either side is the result, as PyTorch's maximum / minimum (std::max would keep
    // x when y is NaN); ties give x, the side the gradient takes (dsl/grad_rules.cpp).
    case Op::Max: return std::isnan(x) || x >= y ? x : y;
    case Op::Min: return std::isnan(x) || x <= y ? x : y;
    case Op::Pow: return std::pow(x, y);
    case Op::Less: return x < y;
    case Op::LessEqual: return x <= y;
    case Op::Greater: return x > y;
    case Op::GreaterEqual: return x >= y;
    case Op::Equal: return x == y;
    case Op::NotEqual: return x != y;
    default: break;
  }
  internal_check(false) << op_name(op) << " is not a binary op";
  return 0;
}

}  // namespace

Array eval_constant(const EvalArgs& a) {
  Array out = a.result();
  // A bf16 / f16 constant is its value rounded once, as the JIT's literal is.
  const double v = a.node.dtype == DType::i32 ? to_i32(a.node.attrs.value)
                   : is_half_float(a.node.dtype) ? round_to(a.node.dtype, a.node.attrs.value)
                                                 : a.node.attrs.value;
  std::fill(out.data.begin(), out.data.end(), v);
  return out;
}

Array eval_unary(const EvalArgs& a) {
  const Array& x = a.in(0);
  Array out = a.result();
  const Op op = a.node.op;
  for (int64_t i = 0; i < out.size(); ++i) {
    if (op == Op::Cast) {
      // To i32 truncates toward zero; to f32 every i32 value is already exact; to bf16 and
      // f16 rounds to nearest even (the cast is where a reduced precision's rounding happens).
      out[i] = a.node.dtype == DType::i32 ? to_i32(x[i])
               : is_half_float(a.node.dtype) ? round_to(a.node.dtype, x[i]) : x[i];
    } else {
      out[i] = unary_value(op, x[i]);
    }
  }
  return out;
}

Array eval_binary(const EvalArgs& a) {
  const Array &x = a.in(0), &y = a.in(1);
  const bool integer = x.dtype == DType::i32;
  Array out = a.result();
  for (int64_t i = 0; i < out.size(); ++i) {
    const std::vector<int64_t> index = unravel(i, out.shape);
    const double xv = x[broadcast_index(x.shape, index)];
    const double yv = y[broadcast_index(y.shape, index)];
    user_check(!(integer && a.node.op == Op::Div && yv == 0), a.node)
        << "div: integer division by zero (element " << i << " of " << out.shape.str()
        << "); guard the divisor or divide in f32";
    out[i] = binary_value(a.node.op, xv, yv, integer);
  }
  return out;
}

Array eval_select(const EvalArgs& a) {
  const Array &cond = a.in(0), &x = a.in(1), &y = a.in(2);
  Array out = a.result();
  for (int64_t i = 0; i < out.size(); ++i) {
    const std::vector<int64_t> index = unravel(i, out.shape);
    out[i] = cond[broadcast_index(cond.shape, index)] != 0 ? x[broadcast_index(x.shape, index)]
                                                           : y[broadcast_index(y.shape, index)];
  }
  return out;
}

}  // namespace towerjit::reference
