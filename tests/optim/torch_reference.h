// The test oracle for optimisers: torch.optim's single-tensor update loops transcribed into
// plain C++ on doubles (torch/optim/{sgd,adam,adamw,rmsprop,adagrad}.py), independent of the
// graph, so a mistake in the DSL's formulas cannot hide in both sides.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>

#include "optim_util.h"

namespace optim_test {

struct TorchConfig {
  tj::OptimizerKind kind = tj::OptimizerKind::sgd;
  // The schedule, at the global step before the update (0.1 throughout by default).
  std::function<double(double step)> lr = [](double) { return 0.1; };
  double momentum = 0, beta1 = 0.9, beta2 = 0.999, alpha = 0.99, eps = 1e-8;
  bool nesterov = false, centered = false;
  double lr_decay = 0, initial_accumulator = 0, weight_decay = 0, clip_norm = 0;
};

// One update of every variable of `q` in `s` (weights, slots, "global_step").
inline void torch_step(const TorchConfig& c, const Quadratic& q, State& s) {
  std::vector<double>& global_step = s["global_step"];
  if (global_step.empty()) global_step.push_back(0);
  const double step = global_step[0];
  const double lr = c.lr(step), t = step + 1;
  // Gradients of the quadratic at the current weights, then tf.clip_by_global_norm.
  std::vector<std::vector<double>> grads;
  double squares = 0;
  for (size_t i = 0; i < q.vars.size(); ++i) {
    const std::vector<double>& w = s.at(q.name(i));
    std::vector<double> g(w.size());
    for (size_t j = 0; j < w.size(); ++j) g[j] = q.a(i)[j] * w[j] + q.b(i)[j];
    for (double x : g) squares += x * x;
    grads.push_back(g);
  }
  const double scale = c.clip_norm > 0 ? c.clip_norm / std::max(std::sqrt(squares), c.clip_norm) : 1;
  auto slot = [&](const std::string& name, size_t n, double init = 0) -> std::vector<double>& {
    auto it = s.find(name);
    if (it == s.end()) it = s.emplace(name, std::vector<double>(n, init)).first;
    return it->second;
  };
  using K = tj::OptimizerKind;
  for (size_t i = 0; i < q.vars.size(); ++i) {
    const std::string n = q.name(i);
    std::vector<double>& w = s.at(n);
    for (size_t j = 0; j < w.size(); ++j) {
      double g = grads[i][j] * scale;
      if (c.kind != K::adamw && c.weight_decay != 0) g += c.weight_decay * w[j];
      if (c.kind == K::sgd) {
        w[j] -= lr * g;
      } else if (c.kind == K::momentum) {
        double& buf = slot(n + "/momentum", w.size())[j];
        buf = c.momentum * buf + g;
        w[j] -= lr * (c.nesterov ? g + c.momentum * buf : buf);
      } else if (c.kind == K::adam || c.kind == K::adamw) {
        double& m = slot(n + "/adam_m", w.size())[j];
        double& v = slot(n + "/adam_v", w.size())[j];
        if (c.kind == K::adamw) w[j] *= 1 - lr * c.weight_decay;
        m = c.beta1 * m + (1 - c.beta1) * g;
        v = c.beta2 * v + (1 - c.beta2) * g * g;
        const double bc1 = 1 - std::pow(c.beta1, t), bc2 = 1 - std::pow(c.beta2, t);
        const double denom = std::sqrt(v) / std::sqrt(bc2) + c.eps;
        w[j] -= (lr / bc1) * m / denom;
      } else if (c.kind == K::rmsprop) {
        double& sq = slot(n + "/rmsprop_sq", w.size())[j];
        sq = c.alpha * sq + (1 - c.alpha) * g * g;
        double var = sq;
        if (c.centered) {
          double& mg = slot(n + "/rmsprop_mg", w.size())[j];
          mg += (1 - c.alpha) * (g - mg);
          var = sq - mg * mg;
        }
        const double avg = std::sqrt(var) + c.eps;
        if (c.momentum > 0) {
          double& buf = slot(n + "/rmsprop_momentum", w.size())[j];
          buf = c.momentum * buf + g / avg;
          w[j] -= lr * buf;
        } else {
          w[j] -= lr * g / avg;
        }
      } else {  // adagrad
        double& sum = slot(n + "/adagrad_sum", w.size(), c.initial_accumulator)[j];
        const double clr = lr / (1 + (t - 1) * c.lr_decay);
        sum += g * g;
        w[j] -= clr * g / (std::sqrt(sum) + c.eps);
      }
    }
  }
  s.at("global_step")[0] = step + 1;
}

}  // namespace optim_test
