// NaN never vanishes through a max: maximum / minimum, max reductions (along a row, along the
// batch, over everything) and max pools (the 2x2 path, a window inside the image, a padded one)
// give NaN wherever a NaN is among what they compare, and their gradients go to that NaN, so a
// NaN dy lands on the NaN input and every other input gets exactly 0; argmax points at the first
// NaN and softmax is NaN across a row holding one (docs/dsl.md, "NaN").
// The expected values come from the plain loops below (the oracle), not from the reference, so
// the reference interpreter is checked too. Each case runs on the backend a test passes
// (tests/jit/test_cpu_ops.cpp at every TOWERJIT_CPU_ISA level, tests_gpu/test_gpu_ops.cpp on a
// GPU or the emulated one) at rows of 1, 7 and 127 with the NaN first, in the middle and last.
#pragma once

#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "graph_cases.h"

namespace towerjit::testing::nan_cases {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// NaN where `want` is, within a relative 1e-5 elsewhere; the first mismatches in the message.
inline void check_values(const reference::Array& got, const std::vector<double>& want, const std::string& what) {
  REQUIRE(got.size() == static_cast<int64_t>(want.size()));
  std::ostringstream bad;
  int wrong = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[static_cast<int64_t>(i)], w = want[i];
    const bool ok = std::isnan(w) ? std::isnan(g) : !std::isnan(g) && std::fabs(g - w) <= 1e-5 * std::max(1.0, std::fabs(w));
    if (!ok && wrong++ < 5) bad << " [" << i << "] got " << g << " want " << w << ";";
  }
  INFO(what << ": " << wrong << " of " << want.size() << " wrong:" << bad.str());
  CHECK(wrong == 0);
}

// Both sides of a run against the oracle's values, output by output.
inline void check_run(const JitRun& r, const std::vector<std::vector<double>>& want, const std::string& what) {
  REQUIRE(r.jit.size() == want.size());
  for (size_t o = 0; o < want.size(); ++o) {
    check_values(r.ref[o], want[o], what + ", reference, output " + std::to_string(o));
    check_values(r.jit[o], want[o], what + ", backend, output " + std::to_string(o));
  }
}

// The oracle's order: a NaN is larger than every number; among equals the first is kept.
inline bool beats(double v, double best) { return v > best || (std::isnan(v) && !std::isnan(best)); }

// The NaN positions tried in a row of n: first, middle, last.
inline std::set<int64_t> nan_positions(int64_t n) { return {0, n / 2, n - 1}; }

// maximum / minimum of x and y [B, n] and their gradients, once with dy = c (finite: the
// gradient's routing) and once with dy = 2 * out (NaN where out is: where the NaN lands).
// Rows: NaN in x at p; NaN in y at p; none; NaN in both at p.
inline void binary_max_min(const cases::Runner& run, int64_t n, const std::string& where) {
  Graph g;
  GraphScope use(g);
  auto x = input("x", {kBatch, n}), y = input("y", {kBatch, n}), c = input("c", {kBatch, n});
  auto mx = maximum(x, y), mn = minimum(x, y);
  auto routed = grad(sum(mx * c) + sum(mn * c * 3.0), {x, y});
  auto mx2 = grad(sum(mx * mx), {x, y}), mn2 = grad(sum(mn * mn), {x, y});
  for (int64_t p : nan_positions(n)) {
    reference::Array xs = random_array({4, n}, 11), ys = random_array({4, n}, 12), cs = random_array({4, n}, 13);
    xs[0 * n + p] = kNaN, ys[1 * n + p] = kNaN, xs[3 * n + p] = kNaN, ys[3 * n + p] = kNaN;
    std::vector<double> want_mx, want_mn, gx, gy, mx_x, mx_y, mn_x, mn_y;
    for (int64_t i = 0; i < 4 * n; ++i) {
      const double a = xs[i], b = ys[i], ci = cs[i];
      const bool max_a = std::isnan(a) || a >= b, min_a = std::isnan(a) || a <= b;  // ties to a
      const double vmax = max_a ? a : b, vmin = min_a ? a : b;
      want_mx.push_back(vmax), want_mn.push_back(vmin);
      gx.push_back((max_a ? ci : 0) + (min_a ? 3 * ci : 0));
      gy.push_back((max_a ? 0 : ci) + (min_a ? 0 : 3 * ci));
      mx_x.push_back(max_a ? 2 * vmax : 0), mx_y.push_back(max_a ? 0 : 2 * vmax);
      mn_x.push_back(min_a ? 2 * vmin : 0), mn_y.push_back(min_a ? 0 : 2 * vmin);
    }
    reference::Variables vars;
    const JitRun r = run(g, {mx, mn, routed[0], routed[1], mx2[0], mx2[1], mn2[0], mn2[1]},
                         {{"x", xs}, {"y", ys}, {"c", cs}}, vars, false, 0);
    check_run(r, {want_mx, want_mn, gx, gy, mx_x, mx_y, mn_x, mn_y},
              "maximum/minimum, n " + std::to_string(n) + ", NaN at " + std::to_string(p) + where);
  }
}

// The oracle's max over the elements `at` of x and its gradient for dy: dy / (number of hits)
// at each hit (the NaNs when there is one, else the elements equal to the maximum).
inline double slice_max(const reference::Array& x, const std::vector<int64_t>& at, double dy, std::vector<double>& dx) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i : at)
    if (beats(x[i], m)) m = x[i];
  auto hit = [&](int64_t i) { return std::isnan(m) ? std::isnan(x[i]) : x[i] == m; };
  int hits = 0;
  for (int64_t i : at) hits += hit(i);
  for (int64_t i : at)
    if (hit(i)) dx[i] += dy / hits;
  return m;
}

// max along the row, along the batch and over everything, of x [B, n] (rows: NaN at p; none;
// NaN at p and at 0, two NaNs in one row and, along the batch, a column of two NaNs whose
// gradient they share), with dy = w (routing) and dy = 2 * max (NaN dy); and the row's argmax
// (the first NaN) and softmax (NaN across a row holding one).
inline void reductions(const cases::Runner& run, int64_t n, const std::string& where) {
  Graph g;
  GraphScope use(g);
  auto x = input("x", {kBatch, n}), wr = input("wr", {kBatch}), wc = input("wc", {n});
  auto row = max(x, {1}), col = max(x, {0}), all = max(x), arg = argmax(x, 1), soft = softmax(x);
  auto routed = grad(sum(row * wr) + sum(col * wc) + all * 5.0, {x})[0];
  auto row2 = grad(sum(row * row), {x})[0], col2 = grad(sum(col * col), {x})[0];
  for (int64_t p : nan_positions(n)) {
    reference::Array xs = random_array({3, n}, 21), ws_r = random_array({3}, 22), ws_c = random_array({n}, 23);
    xs[p] = kNaN, xs[2 * n + p] = kNaN, xs[2 * n] = kNaN;
    std::vector<double> want_row, want_col, want_arg, want_soft, d_routed(3 * n, 0.0), d_row2(3 * n, 0.0),
        d_col2(3 * n, 0.0);
    for (int64_t i = 0; i < 3; ++i) {
      std::vector<int64_t> at;
      for (int64_t j = 0; j < n; ++j) at.push_back(i * n + j);
      const double m = slice_max(xs, at, ws_r[i], d_routed);
      want_row.push_back(m);
      slice_max(xs, at, 2 * m, d_row2);
      int64_t first = 0;
      double total = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (beats(xs[i * n + j], xs[i * n + first])) first = j;
        total += std::exp(xs[i * n + j] - m);  // NaN for the whole row when m is
      }
      want_arg.push_back(static_cast<double>(first));
      for (int64_t j = 0; j < n; ++j) want_soft.push_back(std::exp(xs[i * n + j] - m) / total);
    }
    for (int64_t j = 0; j < n; ++j) {
      const std::vector<int64_t> at{j, n + j, 2 * n + j};
      const double m = slice_max(xs, at, ws_c[j], d_routed);
      want_col.push_back(m);
      slice_max(xs, at, 2 * m, d_col2);
    }
    std::vector<int64_t> every(3 * n);
    for (int64_t i = 0; i < 3 * n; ++i) every[i] = i;
    const double want_all = slice_max(xs, every, 5.0, d_routed);
    reference::Variables vars;
    const JitRun r = run(g, {row, col, all, routed, row2, col2, arg, soft}, {{"x", xs}, {"wr", ws_r}, {"wc", ws_c}},
                         vars, false, 0);
    check_run(r, {want_row, want_col, {want_all}, d_routed, d_row2, d_col2, want_arg, want_soft},
              "max reductions, n " + std::to_string(n) + ", NaN at " + std::to_string(p) + where);
  }
}

// The oracle's max pool of x [N, C, H, W] and its gradient for dy (a window's first maximum).
inline std::vector<double> pool(const reference::Array& x, Pool2DOptions o, const std::vector<double>& dy,
                                std::vector<double>& dx, int64_t& oh, int64_t& ow) {
  const int64_t planes = x.shape[0] * x.shape[1], h = x.shape[2], w = x.shape[3];
  const int s = o.stride ? o.stride : o.kernel;
  oh = (h + 2 * o.pad - o.kernel) / s + 1, ow = (w + 2 * o.pad - o.kernel) / s + 1;
  std::vector<double> y;
  dx.assign(x.size(), 0.0);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        int64_t best = -1;
        for (int64_t a = i * s - o.pad; a < i * s - o.pad + o.kernel; ++a)
          for (int64_t b = j * s - o.pad; b < j * s - o.pad + o.kernel; ++b) {
            const int64_t at = (pl * h + a) * w + b;
            if (a >= 0 && a < h && b >= 0 && b < w && (best < 0 || beats(x[at], x[best]))) best = at;
          }
        if (!dy.empty()) dx[best] += dy[y.size()];
        y.push_back(x[best]);
      }
  return y;
}

// Max pools of [B, 1, 4, 2n + 1] images (the odd width leaves the last column outside every
// 2x2 window: a NaN there changes nothing): image 0 has NaNs in rows 1 and 2 at column q (the
// 3x3 windows see both, the first wins), image 1 none. dy = c, then dy = 2 * pool.
inline void pools(const cases::Runner& run, int64_t n, const std::string& where) {
  const int64_t w = 2 * n + 1;
  const Pool2DOptions forms[] = {{.kernel = 2}, {.kernel = 3, .stride = 1}, {.kernel = 3, .stride = 2, .pad = 1}};
  for (const Pool2DOptions& o : forms) {
    Graph g;
    GraphScope use(g);
    auto x = input("x", {kBatch, 1, 4, w});
    auto y = max_pool2d(x, o);
    auto c = input("c", y.shape());
    auto routed = grad(sum(y * c), {x})[0], squared = grad(sum(y * y), {x})[0];
    for (int64_t q : nan_positions(w)) {
      reference::Array xs = random_array({2, 1, 4, w}, 31);
      xs[1 * w + q] = kNaN, xs[2 * w + q] = kNaN;
      std::vector<double> unused, d_routed, d_squared;
      int64_t oh, ow;
      const std::vector<double> want = pool(xs, o, {}, unused, oh, ow);
      reference::Array cs = random_array({2, 1, oh, ow}, 32);
      pool(xs, o, cs.data, d_routed, oh, ow);
      std::vector<double> twice = want;
      for (double& v : twice) v *= 2;
      pool(xs, o, twice, d_squared, oh, ow);
      reference::Variables vars;
      const JitRun r = run(g, {y, routed, squared}, {{"x", xs}, {"c", cs}}, vars, false, 0);
      check_run(r, {want, d_routed, d_squared},
                "max_pool2d kernel " + std::to_string(o.kernel) + " stride " + std::to_string(o.stride) + " pad " +
                    std::to_string(o.pad) + ", width " + std::to_string(w) + ", NaN at column " + std::to_string(q) + where);
    }
  }
}

// Every form at every size.
inline void max_keeps_nan(const cases::Runner& run, const std::string& where) {
  for (int64_t n : {1, 7, 127}) {
    binary_max_min(run, n, where);
    reductions(run, n, where);
    pools(run, n, where);
  }
}

}  // namespace towerjit::testing::nan_cases
