// The fused attention ops (ops.def: Attention, AttentionGradQ, AttentionGradKV) in double
// precision, row by row with the whole row of scores at hand, and their error bounds. The
// bounds follow error_bounds.cpp's running analysis; what each float32 rounding of a tiled,
// online-softmax backend adds is written beside the term that covers it.
#include <cmath>
#include <vector>

#include "dsl/error.h"
#include "jit/kir/attention_geometry.h"
#include "jit/reference/eval.h"

namespace towerjit::reference {
namespace {

constexpr double kU = 0x1p-24;      // float32's unit roundoff
constexpr double kLibm = 4;         // ulps of expf / logf (error_bounds.cpp)
constexpr double kFlushed = 0x1p-126;

kir::AttentionGeometry geometry(const EvalArgs& a) {
  return kir::attention_geometry(a.in(0).shape, a.in(2).shape, a.node.attrs.causal);
}

// Row-major views of one problem's operands: q, k, v, and the packed output / its gradient.
struct Problem {
  const kir::AttentionGeometry& g;
  int64_t b;
  double q(const Array& x, int64_t i, int64_t c) const { return x[(b * g.tq + i) * g.d + c]; }
  double k(const Array& x, int64_t j, int64_t c) const { return x[(b * g.tk + j) * g.d + c]; }
  double v(const Array& x, int64_t j, int64_t c) const { return x[(b * g.tk + j) * g.dv + c]; }
  // column c of row i of the packed [tq, dv + 1]; c == dv is the log-sum-exp.
  double o(const Array& x, int64_t i, int64_t c) const { return x[(b * g.tq + i) * (g.dv + 1) + c]; }
};

// scale * q_i . k_j over (qa, ka): the values, or with magnitudes and bounds, their bounds.
double dot_qk(const Problem& p, const Array& qa, const Array& ka, int64_t i, int64_t j, double scale) {
  double s = 0;
  for (int64_t c = 0; c < p.g.d; ++c) s += p.q(qa, i, c) * p.k(ka, j, c);
  return s * scale;
}

// dO_i . v_j, and dO_i . O_i, over the arrays given.
double dot_ov(const Problem& p, const Array& dy, const Array& va, int64_t i, int64_t j) {
  double s = 0;
  for (int64_t c = 0; c < p.g.dv; ++c) s += p.o(dy, i, c) * p.v(va, j, c);
  return s;
}
double dot_oo(const Problem& p, const Array& x, const Array& y, int64_t i) {
  double s = 0;
  for (int64_t c = 0; c < p.g.dv; ++c) s += p.o(x, i, c) * p.o(y, i, c);
  return s;
}

Array abs_of(const Array& a) {
  Array out = a;
  for (double& v : out.data) v = std::fabs(v);
  return out;
}

// A score's bound: scale (|q| . ek + eq . |k| + eq . ek) plus the rounding of a d-term dot
// product and of the scaling (the scale itself rounded to float32 and the product rounded,
// whichever operand a backend scales first), relative to scale |q| . |k|.
struct ScoreBounds {
  const Array &q, &k, &eq, &ek;
  Array mq, mk;
  double scale, gamma;
  ScoreBounds(const Array& q_, const Array& k_, const Array& eq_, const Array& ek_, double scale_, double d)
      : q(q_), k(k_), eq(eq_), ek(ek_), mq(abs_of(q_)), mk(abs_of(k_)), scale(scale_),
        gamma(rounding_gamma(d) + 2 * kU) {}
  double operator()(const Problem& p, int64_t i, int64_t j) const {
    const double inputs = dot_qk(p, mq, ek, i, j, scale) + dot_qk(p, eq, mk, i, j, scale) + dot_qk(p, eq, ek, i, j, scale);
    return inputs + gamma * dot_qk(p, mq, mk, i, j, scale) + (p.g.d + 1) * kFlushed;
  }
};

// Rows of probabilities recomputed from the inputs the grad ops get: p_ij = exp(s_ij - lse_i),
// with lse_i read from the packed output.
double probability(const Problem& p, const Array& q, const Array& k, const Array& y, int64_t i, int64_t j, double scale) {
  return std::exp(dot_qk(p, q, k, i, j, scale) - p.o(y, i, p.g.dv));
}

}  // namespace

Array eval_attention(const EvalArgs& a) {
  const kir::AttentionGeometry g = geometry(a);
  const double scale = a.node.attrs.value;
  Array out = a.result();
  std::vector<double> s(g.tk);
  for (int64_t b = 0; b < g.batches; ++b) {
    const Problem p{g, b};
    for (int64_t i = 0; i < g.tq; ++i) {
      const int64_t n = g.keys(i);
      double top = -INFINITY, total = 0;
      for (int64_t j = 0; j < n; ++j) top = std::max(top, s[j] = dot_qk(p, a.in(0), a.in(1), i, j, scale));
      for (int64_t j = 0; j < n; ++j) total += (s[j] = std::exp(s[j] - top));
      double* row = &out[(b * g.tq + i) * (g.dv + 1)];
      for (int64_t c = 0; c < g.dv; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += s[j] * p.v(a.in(2), j, c);
        row[c] = acc / total;
      }
      row[g.dv] = top + std::log(total);
    }
  }
  return out;
}

Array eval_attention_grad_q(const EvalArgs& a) {
  const kir::AttentionGeometry g = geometry(a);
  const double scale = a.node.attrs.value;
  const Array &q = a.in(0), &k = a.in(1), &v = a.in(2), &y = a.in(3), &dy = a.in(4);
  Array out = a.result();
  for (int64_t b = 0; b < g.batches; ++b) {
    const Problem p{g, b};
    for (int64_t i = 0; i < g.tq; ++i) {
      const double D = dot_oo(p, dy, y, i);
      for (int64_t j = 0; j < g.keys(i); ++j) {
        const double ds = probability(p, q, k, y, i, j, scale) * (dot_ov(p, dy, v, i, j) - D);
        for (int64_t c = 0; c < g.d; ++c) out[(b * g.tq + i) * g.d + c] += scale * ds * p.k(k, j, c);
      }
    }
  }
  return out;
}

Array eval_attention_grad_kv(const EvalArgs& a) {
  const kir::AttentionGeometry g = geometry(a);
  const double scale = a.node.attrs.value;
  const Array &q = a.in(0), &k = a.in(1), &v = a.in(2), &y = a.in(3), &dy = a.in(4);
  Array out = a.result();
  const int64_t w = g.d + g.dv;
  for (int64_t b = 0; b < g.batches; ++b) {
    const Problem p{g, b};
    for (int64_t i = 0; i < g.tq; ++i) {
      const double D = dot_oo(p, dy, y, i);
      for (int64_t j = 0; j < g.keys(i); ++j) {
        const double pr = probability(p, q, k, y, i, j, scale);
        const double ds = pr * (dot_ov(p, dy, v, i, j) - D);
        double* row = &out[(b * g.tk + j) * w];
        for (int64_t c = 0; c < g.d; ++c) row[c] += scale * ds * p.q(q, i, c);
        for (int64_t c = 0; c < g.dv; ++c) row[g.d + c] += pr * p.o(dy, i, c);
      }
    }
  }
  return out;
}

// The forward. Each term j of row i enters the numerator sum_j w_j v_j and the denominator
// sum_j w_j (w_j = exp(s_j - m), m the running maximum; the common factor cancels in their
// ratio) multiplied by at most exp(lambda_j) - 1 relative error, lambda_j being the sum of:
//   e_s(j)             the score's error;
//   u |s_j - m|        the rounding of the exponent's argument;
//   u max_j |s_j - m|  the rounded arguments of every rescale exp(m_old - m_new): their sizes
//                      add up to at most the distance from the first maximum to the last;
//   (R + 1)(libm + 1) u  each rescale's exp and product, and the term's own exp: R counts the
//                      keys that may beat every earlier key (a tile rescales only when it
//                      holds one), so the bound holds for any tiling;
//   gamma_(n+1) + u    the sums of n terms (and the product w_j v_j).
// With A = sum_j p_j (|v_j| (e^lambda_j - 1) + e_v(j) e^lambda_j) and B = sum_j p_j (e^lambda_j - 1),
// the quotient is within (A + |O| B) / (1 - B), and its division (or reciprocal and product)
// adds 2 u |O|. The log-sum-exp m + log l moves by at most -log(1 - B), plus its log and add.
Array attention_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, const Array& y) {
  const kir::AttentionGeometry g = geometry(a);
  const double scale = a.node.attrs.value;
  const Array &q = a.in(0), &k = a.in(1), &v = a.in(2), &ev = *bounds[2];
  const ScoreBounds score(q, k, *bounds[0], *bounds[1], scale, static_cast<double>(g.d));
  Array out = a.result();
  std::vector<double> s(g.tk), lambda(g.tk);
  for (int64_t b = 0; b < g.batches; ++b) {
    const Problem p{g, b};
    for (int64_t i = 0; i < g.tq; ++i) {
      const int64_t n = g.keys(i);
      double top = -INFINITY, low = INFINITY, total = 0;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = dot_qk(p, q, k, i, j, scale);
        top = std::max(top, s[j]), low = std::min(low, s[j]);
      }
      // Rescales: a tile raises the running maximum only if it holds a key whose score beats
      // every earlier one, so however the keys are tiled there are at most as many as keys
      // that may be such a record within the scores' errors.
      double records = 0, floor = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        lambda[j] = score(p, i, j);
        if (s[j] + lambda[j] > floor) ++records;
        floor = std::max(floor, s[j] - lambda[j]);
      }
      const double common = kU * (top - low) + (records + 1) * (kLibm + 1) * kU + rounding_gamma(n + 1.0) + kU;
      for (int64_t j = 0; j < n; ++j) {
        lambda[j] = std::expm1(lambda[j] + kU * (top - s[j]) + common);
        total += std::exp(s[j] - top);
      }
      double B = 0;
      for (int64_t j = 0; j < n; ++j) B += std::exp(s[j] - top) / total * lambda[j];
      double* row = &out[(b * g.tq + i) * (g.dv + 1)];
      const double* yrow = &y.data[(b * g.tq + i) * (g.dv + 1)];
      if (B >= 1) {
        for (int64_t c = 0; c <= g.dv; ++c) row[c] = INFINITY;
        continue;
      }
      for (int64_t c = 0; c < g.dv; ++c) {
        double A = 0;
        for (int64_t j = 0; j < n; ++j) {
          const double pj = std::exp(s[j] - top) / total;
          A += pj * (std::fabs(p.v(v, j, c)) * lambda[j] + p.v(ev, j, c) * (1 + lambda[j]));
        }
        row[c] = (A + std::fabs(yrow[c]) * B) / (1 - B) + 2 * kU * std::fabs(yrow[c]) + n * kFlushed;
      }
      row[g.dv] = -std::log1p(-B) + (kLibm + 1) * kU * std::log(total) + 2 * kU * std::fabs(yrow[g.dv]) + kFlushed;
    }
  }
  return out;
}

// The gradients, per (i, j) pair, in the terms the kernels compute them:
//   p = exp(s - lse)   within p (e^(e_s + e_lse + u |s - lse| + (libm + 1) u) - 1);
//   D_i = dO_i . O_i, dp = dO_i . v_j   bilinear, each a dv-term dot product;
//   ds = p (dp - D)    e_p |g| + p e_g + e_p e_g + u |ds|, g = dp - D within e_dp + e_D + u |g|;
// then dq_i = scale sum_j ds k_j, dk_j = scale sum_i ds q_i and dv_j = sum_i p dO_i: bilinear
// sums of n terms, plus the scaling's two roundings.
Array attention_grad_bound(const EvalArgs& a, const std::vector<const Array*>& bounds, const Array&) {
  const kir::AttentionGeometry g = geometry(a);
  const double scale = a.node.attrs.value;
  const Array &q = a.in(0), &k = a.in(1), &v = a.in(2), &y = a.in(3), &dy = a.in(4);
  const Array &eq = *bounds[0], &ek = *bounds[1], &ev = *bounds[2], &ey = *bounds[3], &edy = *bounds[4];
  const ScoreBounds score(q, k, eq, ek, scale, static_cast<double>(g.d));
  const Array my = abs_of(y), mdy = abs_of(dy), mv = abs_of(v), mq = abs_of(q), mk = abs_of(k);
  const bool for_q = a.node.op == Op::AttentionGradQ;
  Array out = a.result();
  const double gamma_dv = rounding_gamma(static_cast<double>(g.dv));
  // Per output element: the sum of the terms' errors, and the sum of the terms' magnitudes
  // (times gamma_n of the number of terms summed into it, at the end).
  Array mags = a.result();
  std::vector<int64_t> terms(out.size(), 0);
  const int64_t w = g.d + g.dv;
  for (int64_t b = 0; b < g.batches; ++b) {
    const Problem p{g, b};
    for (int64_t i = 0; i < g.tq; ++i) {
      const double D = dot_oo(p, dy, y, i);
      const double eD = dot_oo(p, mdy, ey, i) + dot_oo(p, edy, my, i) + dot_oo(p, edy, ey, i) +
                        gamma_dv * dot_oo(p, mdy, my, i) + g.dv * kFlushed;
      const double lse = p.o(y, i, g.dv), e_lse = p.o(ey, i, g.dv);
      for (int64_t j = 0; j < g.keys(i); ++j) {
        const double s = dot_qk(p, q, k, i, j, scale);
        const double pr = std::exp(s - lse);
        const double ep = pr * std::expm1(score(p, i, j) + e_lse + kU * std::fabs(s - lse) + (kLibm + 1) * kU) + kFlushed;
        const double dp = dot_ov(p, dy, v, i, j);
        const double edp = dot_ov(p, mdy, ev, i, j) + dot_ov(p, edy, mv, i, j) + dot_ov(p, edy, ev, i, j) +
                           gamma_dv * dot_ov(p, mdy, mv, i, j) + g.dv * kFlushed;
        const double gd = dp - D, eg = edp + eD + kU * std::fabs(gd);
        const double ds = pr * gd, eds = ep * std::fabs(gd) + pr * eg + ep * eg + kU * std::fabs(ds) + kFlushed;
        if (for_q) {
          for (int64_t c = 0; c < g.d; ++c) {
            const int64_t at = (b * g.tq + i) * g.d + c;
            out[at] += scale * (eds * p.k(mk, j, c) + std::fabs(ds) * p.k(ek, j, c) + eds * p.k(ek, j, c));
            mags[at] += scale * std::fabs(ds) * p.k(mk, j, c);
            ++terms[at];
          }
          continue;
        }
        for (int64_t c = 0; c < g.d; ++c) {
          const int64_t at = (b * g.tk + j) * w + c;
          out[at] += scale * (eds * p.q(mq, i, c) + std::fabs(ds) * p.q(eq, i, c) + eds * p.q(eq, i, c));
          mags[at] += scale * std::fabs(ds) * p.q(mq, i, c);
          ++terms[at];
        }
        for (int64_t c = 0; c < g.dv; ++c) {
          const int64_t at = (b * g.tk + j) * w + g.d + c;
          out[at] += ep * p.o(mdy, i, c) + pr * p.o(edy, i, c) + ep * p.o(edy, i, c);
          mags[at] += pr * p.o(mdy, i, c);
          ++terms[at];
        }
      }
    }
  }
  for (int64_t at = 0; at < out.size(); ++at)
    out[at] += (rounding_gamma(terms[at] + 1.0) + 2 * kU) * mags[at] + (terms[at] + 1) * kFlushed;
  return out;
}

}  // namespace towerjit::reference
