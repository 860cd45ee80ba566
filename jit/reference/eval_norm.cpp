// The fused row ops over the last axis in double precision, and their error bounds: layer norm
// (ops.def: LayerNorm, LayerNormGradInput, LayerNormGradParams) and, at the end, softmax.
//
// The bounds are error_bounds.cpp's running analysis applied to the float32 operations the
// kernels perform, in the order they perform them (runtime/cpu/layer_norm.cpp and
// library_kernels.cu compute exactly these, one rounding each, sums in any order):
//   mean = sum(x) / n;  d = x - mean  (rms: d = x);  var = sum(d * d) / n;
//   rstd = 1 / sqrt(var + eps);  xhat = d * rstd;  y = xhat * gain + bias;
//   backward: g = dy * gain;  s1 = sum(g);  s2 = sum(g * xhat);
//             dx = rstd * ((g - s1 / n) - xhat * (s2 / n))  (rms: without s1);
//             d gain = sum over rows of dy * xhat, d bias = sum over rows of dy.
// Each n-term sum rounds by rounding_gamma(n + 1) of its terms' magnitudes plus one rounding
// of the result (as reduce_bound's sums); a product a b of values within ea, eb moves by
// |b| ea + |a| eb + ea eb and rounds by u |ab|; 1 / sqrt(v) of v within e by
// 1 / sqrt(v - e) - 1 / sqrt(v) and two roundings. A fused multiply-add rounds once where this
// counts two, so the bound covers a backend that contracts. epsilon reaches a float32 kernel
// rounded: its rounding is an input error of var + eps. Denormals may flush: every rounded
// result may also be off by the smallest normal float.
#include <cmath>
#include <limits>
#include <vector>

#include "dsl/error.h"
#include "jit/reference/eval.h"

namespace towerjit::reference {
namespace {

constexpr double kU = 0x1p-24;
constexpr double kFlushed = 0x1p-126;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kLibmUlps = 4;  // exp, as error_bounds.cpp grants the math library

double rounded(double y) { return kU * std::fabs(y) + kFlushed; }

// The error of a product a * b whose factors lie within ea and eb.
double product_error(double a, double b, double ea, double eb) {
  return std::fabs(b) * ea + std::fabs(a) * eb + ea * eb + rounded(a * b);
}

// The rows of x [..., n]: how many, and how long.
struct Rows {
  int64_t count = 0, n = 0;
};

Rows rows_of(const Array& x) {
  const int r = x.shape.rank();
  const int64_t n = x.shape[r - 1];
  return {n == 0 ? 0 : x.size() / n, n};
}

// One row's statistics and normalised values, exact, and (when ex is given) their bounds.
struct RowStats {
  double rstd = 0, e_rstd = 0;
  std::vector<double> d, xhat, e_d, e_xhat;
};

RowStats row_stats(const double* x, const double* ex, int64_t n, double eps, bool rms) {
  RowStats s;
  s.d.resize(n), s.xhat.resize(n), s.e_d.assign(n, 0), s.e_xhat.assign(n, 0);
  const double gamma = rounding_gamma(static_cast<double>(n) + 1);
  double mean = 0, e_mean = 0;
  if (!rms) {
    double sum = 0, errors = 0, magnitudes = 0;
    for (int64_t j = 0; j < n; ++j) sum += x[j], errors += ex ? ex[j] : 0, magnitudes += std::fabs(x[j]);
    mean = sum / n;
    e_mean = (errors + gamma * magnitudes) / n + rounded(mean);
  }
  double var = 0, errors = 0, magnitudes = 0;
  for (int64_t j = 0; j < n; ++j) {
    s.d[j] = x[j] - mean;
    if (ex) s.e_d[j] = rms ? ex[j] : ex[j] + e_mean + rounded(s.d[j]);
    const double sq = s.d[j] * s.d[j];
    var += sq, magnitudes += sq;
    errors += product_error(s.d[j], s.d[j], s.e_d[j], s.e_d[j]);
  }
  var /= n;
  const double e_var = (errors + gamma * magnitudes) / n + rounded(var);
  const double ve = var + eps;
  const double e_ve = e_var + std::fabs(eps - static_cast<double>(static_cast<float>(eps))) + rounded(ve);
  s.rstd = 1 / std::sqrt(ve);
  s.e_rstd = e_ve < ve ? 1 / std::sqrt(ve - e_ve) - s.rstd + 2 * kU * s.rstd + kFlushed : kInf;
  for (int64_t j = 0; j < n; ++j) {
    s.xhat[j] = s.d[j] * s.rstd;
    s.e_xhat[j] = product_error(s.d[j], s.rstd, s.e_d[j], s.e_rstd);
  }
  return s;
}

double epsilon(const EvalArgs& a) { return a.node.attrs.value; }
bool rms(const EvalArgs& a) { return a.node.attrs.rms; }

// Every row of x through `per_row(row, stats)`, the statistics with bounds when ex is given.
template <typename PerRow>
void for_rows(const EvalArgs& a, const Array* ex, PerRow per_row) {
  const Array& x = a.in(0);
  const Rows r = rows_of(x);
  for (int64_t i = 0; i < r.count; ++i)
    per_row(i, row_stats(x.data.data() + i * r.n, ex ? ex->data.data() + i * r.n : nullptr, r.n, epsilon(a), rms(a)));
}

}  // namespace

Array eval_layer_norm(const EvalArgs& a) {
  Array out = a.result();
  const Array& gain = a.in(1);
  const int64_t n = rows_of(a.in(0)).n;
  for_rows(a, nullptr, [&](int64_t i, const RowStats& s) {
    for (int64_t j = 0; j < n; ++j) out[i * n + j] = s.xhat[j] * gain[j] + (rms(a) ? 0 : a.in(2)[j]);
  });
  return out;
}

Array eval_layer_norm_grad_input(const EvalArgs& a) {
  Array out = a.result();
  const Array &gain = a.in(1), &dy = a.in(2);
  const int64_t n = rows_of(a.in(0)).n;
  for_rows(a, nullptr, [&](int64_t i, const RowStats& s) {
    double s1 = 0, s2 = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double g = dy[i * n + j] * gain[j];
      s1 += g, s2 += g * s.xhat[j];
    }
    if (rms(a)) s1 = 0;
    for (int64_t j = 0; j < n; ++j)
      out[i * n + j] = s.rstd * ((dy[i * n + j] * gain[j] - s1 / n) - s.xhat[j] * (s2 / n));
  });
  return out;
}

Array eval_layer_norm_grad_params(const EvalArgs& a) {
  Array out = a.result();
  const Array& dy = a.in(1);
  const int64_t n = rows_of(a.in(0)).n;
  for_rows(a, nullptr, [&](int64_t i, const RowStats& s) {
    for (int64_t j = 0; j < n; ++j) {
      out[j] += dy[i * n + j] * s.xhat[j];
      if (!rms(a)) out[n + j] += dy[i * n + j];
    }
  });
  return out;
}

Array layer_norm_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, const Array& value) {
  Array out = a.result();
  const Array& ex = *bounds[0];
  const int64_t n = rows_of(a.in(0)).n;
  const double gamma = rounding_gamma(static_cast<double>(n) + 1);
  switch (a.node.op) {
    case Op::LayerNorm: {
      const Array &gain = a.in(1), &eg = *bounds[1];
      for_rows(a, &ex, [&](int64_t i, const RowStats& s) {
        for (int64_t j = 0; j < n; ++j) {
          const double e = product_error(s.xhat[j], gain[j], s.e_xhat[j], eg[j]);
          out[i * n + j] = rms(a) ? e : e + (*bounds[2])[j] + rounded(value[i * n + j]);
        }
      });
      return out;
    }
    case Op::LayerNormGradInput: {
      const Array &gain = a.in(1), &dy = a.in(2), &eg = *bounds[1], &edy = *bounds[2];
      std::vector<double> g(n), e_g(n);
      for_rows(a, &ex, [&](int64_t i, const RowStats& s) {
        double s1 = 0, s2 = 0, e_s1 = 0, e_s2 = 0, m1 = 0, m2 = 0;
        for (int64_t j = 0; j < n; ++j) {
          g[j] = dy[i * n + j] * gain[j];
          e_g[j] = product_error(dy[i * n + j], gain[j], edy[i * n + j], eg[j]);
          s1 += g[j], m1 += std::fabs(g[j]), e_s1 += e_g[j];
          s2 += g[j] * s.xhat[j], m2 += std::fabs(g[j] * s.xhat[j]);
          e_s2 += product_error(g[j], s.xhat[j], e_g[j], s.e_xhat[j]);
        }
        e_s1 += gamma * m1 + rounded(s1), e_s2 += gamma * m2 + rounded(s2);
        const double mean1 = rms(a) ? 0 : s1 / n, e_mean1 = rms(a) ? 0 : e_s1 / n + rounded(mean1);
        const double mean2 = s2 / n, e_mean2 = e_s2 / n + rounded(mean2);
        for (int64_t j = 0; j < n; ++j) {
          const double centred = g[j] - mean1, e_centred = rms(a) ? e_g[j] : e_g[j] + e_mean1 + rounded(centred);
          const double p = s.xhat[j] * mean2, e_p = product_error(s.xhat[j], mean2, s.e_xhat[j], e_mean2);
          const double b = centred - p, e_b = e_centred + e_p + rounded(b);
          out[i * n + j] = product_error(s.rstd, b, s.e_rstd, e_b);
        }
      });
      return out;
    }
    case Op::LayerNormGradParams: {
      const Array &dy = a.in(1), &edy = *bounds[1];
      const double rows = static_cast<double>(rows_of(a.in(0)).count);
      Array magnitudes = a.result();
      for_rows(a, &ex, [&](int64_t i, const RowStats& s) {
        for (int64_t j = 0; j < n; ++j) {
          const double d = dy[i * n + j];
          out[j] += product_error(d, s.xhat[j], edy[i * n + j], s.e_xhat[j]);
          magnitudes[j] += std::fabs(d * s.xhat[j]);
          if (rms(a)) continue;
          out[n + j] += edy[i * n + j];
          magnitudes[n + j] += std::fabs(d);
        }
      });
      for (int64_t k = 0; k < out.size(); ++k)
        out[k] += rounding_gamma(rows + 1) * magnitudes[k] + rounded(value[k]);
      return out;
    }
    default: break;
  }
  internal_check(false) << "layer_norm_bound of " << op_name(a.node.op);
  return out;
}


// --- The fused softmax (ops.def: Softmax, SoftmaxGrad), rows over the last axis ----------------
//
// The float32 kernels compute (runtime/cpu/softmax.cpp, library_kernels.cu), per row:
//   m = max(x) (a NaN kept);  e = exp(x - m);  s = sum(e);  y = e * (1 / s);
//   backward: t = sum(y * dy);  dx = y * (dy - t).
// Forward bound: an input error moves y_i by at most y_i expm1(ex_i + max_j ex_j) (the ratio
// of two exps of perturbed arguments); x - m rounds by u |x - m|, which exp turns into a
// relative error, and exp adds its 4 ulps; s sums positive terms (gamma_n of s) whose errors
// weigh in by e_j; 1 / s and the product round once each.

namespace {

// The row's maximum, NaN if any element is, as the kernels' maximum keeps one.
double row_max(const double* x, int64_t n) {
  double m = -kInf;
  for (int64_t j = 0; j < n; ++j)
    if (std::isnan(x[j]) || x[j] > m) m = x[j];
  return m;
}

}  // namespace

Array eval_softmax(const EvalArgs& a) {
  Array out = a.result();
  const Rows r = rows_of(a.in(0));
  for (int64_t i = 0; i < r.count; ++i) {
    const double* x = a.in(0).data.data() + i * r.n;
    const double m = row_max(x, r.n);
    double s = 0;
    for (int64_t j = 0; j < r.n; ++j) s += std::exp(x[j] - m);
    for (int64_t j = 0; j < r.n; ++j) out[i * r.n + j] = std::exp(x[j] - m) / s;
  }
  return out;
}

Array eval_softmax_grad(const EvalArgs& a) {
  Array out = a.result();
  const Array &y = a.in(0), &dy = a.in(1);
  const Rows r = rows_of(y);
  for (int64_t i = 0; i < r.count; ++i) {
    double t = 0;
    for (int64_t j = 0; j < r.n; ++j) t += y[i * r.n + j] * dy[i * r.n + j];
    for (int64_t j = 0; j < r.n; ++j) out[i * r.n + j] = y[i * r.n + j] * (dy[i * r.n + j] - t);
  }
  return out;
}

Array softmax_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, const Array& value) {
  Array out = a.result();
  const Rows r = rows_of(a.in(0));
  const double gamma = rounding_gamma(static_cast<double>(r.n) + 1);
  for (int64_t i = 0; i < r.count; ++i) {
    const int64_t row = i * r.n;
    if (a.node.op == Op::SoftmaxGrad) {
      const Array &y = a.in(0), &dy = a.in(1), &ey = *bounds[0], &edy = *bounds[1];
      double t = 0, e_t = 0, magnitudes = 0;
      for (int64_t j = row; j < row + r.n; ++j) {
        t += y[j] * dy[j], magnitudes += std::fabs(y[j] * dy[j]);
        e_t += product_error(y[j], dy[j], ey[j], edy[j]);
      }
      e_t += gamma * magnitudes + rounded(t);
      for (int64_t j = row; j < row + r.n; ++j) {
        const double b = dy[j] - t;
        out[j] = product_error(y[j], b, ey[j], edy[j] + e_t + rounded(b));
      }
      continue;
    }
    const double* x = a.in(0).data.data() + row;
    const double* ex = bounds[0]->data.data() + row;
    const double m = row_max(x, r.n);
    double s = 0, weighted = 0, e_max = 0;
    for (int64_t j = 0; j < r.n; ++j) {
      const double e = std::exp(x[j] - m);
      s += e, weighted += e * (std::fabs(x[j] - m) + kLibmUlps), e_max = std::max(e_max, ex[j]);
    }
    const double s_relative = kU * weighted / s + gamma;  // s >= 1: the maximum's term is 1
    for (int64_t j = 0; j < r.n; ++j) {
      const double y = value[row + j];
      const double own = kU * (std::fabs(x[j] - m) + kLibmUlps) + s_relative + 2 * kU;
      out[row + j] = y * (std::expm1(ex[j] + e_max) + own) + kFlushed;
    }
  }
  return out;
}

}  // namespace towerjit::reference
