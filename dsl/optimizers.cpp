// Each optimiser is one function from (weight, gradient, slots) to update ops, written as the
// PyTorch single-tensor loop it reproduces, so the two can be read side by side.
#include "dsl/optimizers.h"

#include <cmath>
#include <optional>
#include <set>
#include <sstream>

#include "dsl/ops_internal.h"
#include "dsl/optimizers_sparse.h"
#include "dsl/state.h"

namespace towerjit {

namespace {

using detail::in_scope;

// What every per-variable update of one apply() shares.
struct Step {
  Graph* graph;
  Tensor lr;  // the schedule at the global step before this update
  Tensor t;   // the update's number, global_step + 1 (Adam's bias correction, Adagrad's decay)
  Loc loc;
  // With loss scaling, 1 when the gradients are finite, else 0: every update then keeps the old
  // value (the step is skipped). Empty: no gate.
  Tensor apply_if = {};
};

Tensor slot(const Step& s, Tensor w, const char* name, Initializer init = init::zeros()) {
  const std::string full = w.node().attrs.name + "/" + name;
  return detail::state_variable(*s.graph, full, w.shape(), init, s.loc);
}

void update(std::vector<Tensor>& out, const Step& s, Tensor variable, Tensor value) {
  if (s.apply_if.valid()) value = where(s.apply_if, value, variable, s.loc);
  out.push_back(assign(variable, value, s.loc));
}

// torch.optim.SGD with dampening 0.
void sgd_update(const Optimizer& o, const Step& s, Tensor w, Tensor g, std::vector<Tensor>& out) {
  const Loc loc = s.loc;
  Tensor d = g;
  if (o.kind == OptimizerKind::momentum) {
    Tensor buf = slot(s, w, "momentum");
    Tensor buf1 = add(mul(o.momentum, buf, loc), g, loc);  // first step: 0 * 0 + g = g
    update(out, s, buf, buf1);
    d = o.nesterov ? add(g, mul(o.momentum, buf1, loc), loc) : buf1;
  }
  update(out, s, w, sub(w, mul(s.lr, d, loc), loc));
}

// torch.optim.Adam / AdamW (amsgrad off).
void adam_update(const Optimizer& o, const Step& s, Tensor w, Tensor g, std::vector<Tensor>& out) {
  const Loc loc = s.loc;
  Tensor m = slot(s, w, "adam_m"), v = slot(s, w, "adam_v");
  Tensor m1 = add(mul(o.beta1, m, loc), mul(1.0 - o.beta1, g, loc), loc);
  Tensor v1 = add(mul(o.beta2, v, loc), mul(1.0 - o.beta2, mul(g, g, loc), loc), loc);
  update(out, s, m, m1);
  update(out, s, v, v1);
  // PyTorch computes both corrections in Python doubles; one_minus_power gets them to f32.
  Tensor bias1 = detail::one_minus_power(o.beta1, s.t, loc);
  Tensor bias2 = detail::one_minus_power(o.beta2, s.t, loc);
  Tensor step_size = div(s.lr, bias1, loc);
  Tensor denom = add(div(sqrt(v1, loc), sqrt(bias2, loc), loc), o.eps, loc);
  Tensor base = w;  // AdamW decays the weight itself, not the gradient the moments see
  if (o.kind == OptimizerKind::adamw && o.weight_decay != 0)
    base = mul(w, sub(1.0, mul(s.lr, o.weight_decay, loc), loc), loc);
  update(out, s, w, sub(base, div(mul(step_size, m1, loc), denom, loc), loc));
}

// torch.optim.RMSprop.
void rmsprop_update(const Optimizer& o, const Step& s, Tensor w, Tensor g,
                    std::vector<Tensor>& out) {
  const Loc loc = s.loc;
  Tensor sq = slot(s, w, "rmsprop_sq");
  Tensor sq1 = add(mul(o.alpha, sq, loc), mul(1.0 - o.alpha, mul(g, g, loc), loc), loc);
  update(out, s, sq, sq1);
  Tensor var = sq1;
  if (o.centered) {
    Tensor mg = slot(s, w, "rmsprop_mg");
    Tensor mg1 = add(mg, mul(1.0 - o.alpha, sub(g, mg, loc), loc), loc);  // lerp, as PyTorch
    update(out, s, mg, mg1);
    var = sub(sq1, mul(mg1, mg1, loc), loc);
  }
  Tensor avg = add(sqrt(var, loc), o.eps, loc);
  Tensor d = div(g, avg, loc);
  if (o.momentum > 0) {
    Tensor buf = slot(s, w, "rmsprop_momentum");
    d = add(mul(o.momentum, buf, loc), d, loc);
    update(out, s, buf, d);
  }
  update(out, s, w, sub(w, mul(s.lr, d, loc), loc));
}

// torch.optim.Adagrad.
void adagrad_update(const Optimizer& o, const Step& s, Tensor w, Tensor g,
                    std::vector<Tensor>& out) {
  const Loc loc = s.loc;
  Tensor acc = slot(s, w, "adagrad_sum", init::constant(o.initial_accumulator));
  Tensor acc1 = add(acc, mul(g, g, loc), loc);
  update(out, s, acc, acc1);
  Tensor clr = s.lr;
  if (o.lr_decay != 0) clr = div(s.lr, add(1.0, mul(sub(s.t, 1.0, loc), o.lr_decay, loc), loc), loc);
  Tensor denom = add(sqrt(acc1, loc), o.eps, loc);
  update(out, s, w, sub(w, mul(clr, div(g, denom, loc), loc), loc));
}

void check_range(bool ok, const char* what, double v, const char* want, Loc loc) {
  user_check(ok, loc) << "optimizer: " << what << " is " << v << " but must be " << want;
}

void check_hyperparameters(const Optimizer& o, Loc loc) {
  check_range(o.momentum >= 0, "momentum", o.momentum, ">= 0", loc);
  check_range(!o.nesterov || o.momentum > 0, "momentum", o.momentum,
              "> 0 with nesterov (PyTorch's rule: Nesterov needs momentum)", loc);
  check_range(o.beta1 >= 0 && o.beta1 < 1, "beta1", o.beta1, "in [0, 1)", loc);
  check_range(o.beta2 >= 0 && o.beta2 < 1, "beta2", o.beta2, "in [0, 1)", loc);
  check_range(o.alpha >= 0 && o.alpha <= 1, "alpha", o.alpha, "in [0, 1]", loc);
  check_range(o.eps >= 0, "eps", o.eps, ">= 0", loc);
  check_range(o.weight_decay >= 0, "weight_decay", o.weight_decay, ">= 0", loc);
  check_range(o.lr_decay >= 0, "lr_decay", o.lr_decay, ">= 0", loc);
  check_range(o.initial_accumulator >= 0, "initial_accumulator", o.initial_accumulator, ">= 0",
              loc);
  check_range(o.clip_norm >= 0, "clip_norm", o.clip_norm, ">= 0 (0: no clipping)", loc);
  if (o.loss_scale) detail::check_loss_scale(*o.loss_scale, loc);
}

// Every pair is an f32 variable of one graph and a gradient of its shape; no variable twice.
Graph& check_pairs(const std::vector<Tensor>& grads, const std::vector<Tensor>& vars, Loc loc) {
  user_check(!vars.empty() && grads.size() == vars.size(), loc)
      << "optimizer apply: got " << grads.size() << " gradients for " << vars.size()
      << " variables; pass one gradient per variable, in the same order (grad(loss, vars))";
  user_check(vars[0].valid(), loc)
      << "optimizer apply: target 0 is an empty tensor; pass the tensors trainable_variables() "
         "returns";
  Graph& g = vars[0].graph();
  std::set<int> seen;
  for (size_t i = 0; i < vars.size(); ++i) {
    const Tensor& v = vars[i];
    user_check(v.valid() && &v.graph() == &g && v.node().op == Op::Variable &&
                   v.dtype() == DType::f32, loc)
        << "optimizer apply: target " << i << " must be an f32 variable of the graph but is "
        << (v.valid() ? v.describe() : std::string("an empty tensor"))
        << "; pass the tensors trainable_variables() returns";
    const std::string& name = v.node().attrs.name;
    user_check(seen.insert(v.id()).second, loc)
        << "optimizer apply: variable \"" << name << "\" is listed twice; each variable gets "
        << "one update per apply (sum its gradients first)";
    user_check(grads[i].valid() && &grads[i].graph() == &g, loc)
        << "optimizer apply: variable \"" << name << "\" has no gradient" << in_scope(g)
        << "; every variable passed to apply needs one (leave it out of the list, or check "
           "that the loss depends on it)";
    user_check(grads[i].shape() == v.shape() && grads[i].dtype() == DType::f32, loc)
        << "optimizer apply: the gradient of \"" << name << "\" is " << grads[i].describe()
        << " but the variable is f32" << v.shape().str()
        << "; pass the gradients in the same order as the variables";
  }
  return g;
}

// tf.clip_by_global_norm: one scale for all gradients, 1 while the norm is within clip.
std::vector<Tensor> clip_by_global_norm(std::vector<Tensor> grads, double clip, Loc loc) {
  Tensor squares;
  for (const Tensor& g : grads) {
    Tensor s = sum(mul(g, g, loc), {}, false, loc);
    squares = squares.valid() ? add(squares, s, loc) : s;
  }
  Tensor scale = div(clip, maximum(sqrt(squares, loc), clip, loc), loc);
  for (Tensor& g : grads) g = mul(g, scale, loc);
  return grads;
}

}  // namespace

// 1 - pow(beta, t) loses digits twice in f32: beta rounds to float (0.999f is 0.99900001), and
// the subtraction cancels, magnifying that rounding by 1 / (1 - beta) (1.3e-5 at t = 1, so
// Adam's first step came out 6.8e-6 small, where PyTorch computes in double). Instead
// c = log(beta) is taken in double here, x = t c (t is an exact integer: two roundings), and
//   1 - e^x = -tanh(x / 2) (e^x + 1)      [tanh(x / 2) = (e^x - 1) / (e^x + 1)]
// has no cancellation: tanh keeps its relative accuracy near 0 and e^x + 1 lies in (1, 2].
// For x < 0 the condition number of 1 - e^x in x is |x| e^x / (1 - e^x) < 1, so x's error
// passes through no larger. No new op (expm1) is needed: within 10 roundings in all
// (tests/jit/graph_cases.h counts them), at most 4 measured for beta up to 0.99999.
Tensor detail::one_minus_power(double beta, Tensor t, Loc loc) {
  internal_check(beta >= 0 && beta < 1) << "one_minus_power: beta " << beta << " outside [0, 1)";
  if (beta == 0)  // 1 - 0^t = 1; log(0) would be -inf
    return broadcast_to(detail::as_tensor(Operand(1.0, loc), t.graph(), DType::f32), t.shape(), loc);
  // x / 2 as t * (c / 2), not as a product of x: then t is the only value read twice, and
  // the corrections fuse as the plain formula did (x read twice would be a kernel's output).
  // Halving is exact in f32, so both see the same x.
  const double c = std::log(beta);
  Tensor half_tanh = tanh(mul(t, c / 2, loc), loc);
  return neg(mul(half_tanh, add(exp(mul(t, c, loc), loc), 1.0, loc), loc), loc);
}

Optimizer Optimizer::with_weight_decay(double wd) const {
  Optimizer o = *this;
  o.weight_decay = wd;
  return o;
}

Optimizer Optimizer::with_loss_scale(DynamicLossScale scale) const {
  Optimizer o = *this;
  o.loss_scale = scale;
  return o;
}

Tensor Optimizer::scale_loss(Tensor loss, Loc loc) const {
  return loss_scale ? detail::scale_loss(loss, *loss_scale, loc) : loss;
}

Optimizer Optimizer::with_clip_by_global_norm(double clip) const {
  Optimizer o = *this;
  o.clip_norm = clip;
  return o;
}

std::vector<Tensor> Optimizer::apply(const std::vector<Tensor>& grads,
                                     const std::vector<Tensor>& variables, Loc loc) const {
  check_hyperparameters(*this, loc);
  Graph& g = check_pairs(grads, variables, loc);
  GraphScope in(g);  // the global step and constants belong to the variables' graph
  Tensor step = global_step(loc);
  Step s{&g, learning_rate.at(step, loc), add(step, 1.0, loc), loc};
  std::vector<Tensor> out;
  std::vector<Tensor> given = grads;
  if (loss_scale) {  // gradients of the scaled loss: unscaled first, the step gated on them
    detail::UnscaledGradients u = detail::unscale_gradients(grads, *loss_scale, out, loc);
    given = std::move(u.grads);
    s.apply_if = u.finite;
  }
  // A sparse gradient (dsl/sparse_gradients.h) is applied to the rows it touched; checked
  // first, as clipping and weight decay would read it densely.
  std::vector<std::optional<SparseGradient>> sparse;
  for (size_t i = 0; i < variables.size(); ++i) {
    sparse.push_back(as_sparse(given[i]));
    if (sparse.back()) detail::check_sparse_apply(*this, variables[i], loc);
  }
  std::vector<Tensor> clipped = clip_norm > 0 ? clip_by_global_norm(given, clip_norm, loc) : given;
  for (size_t i = 0; i < variables.size(); ++i) {
    const Tensor w = variables[i];
    if (sparse[i]) {
      detail::sparse_apply(*this, s.lr, s.t, w, *sparse[i], out, loc);
      continue;
    }
    Tensor grad = clipped[i];
    if (kind != OptimizerKind::adamw && weight_decay != 0)
      grad = add(grad, mul(weight_decay, w, loc), loc);  // L2 through the gradient
    switch (kind) {
      case OptimizerKind::sgd:
      case OptimizerKind::momentum: sgd_update(*this, s, w, grad, out); break;
      case OptimizerKind::adam:
      case OptimizerKind::adamw: adam_update(*this, s, w, grad, out); break;
      case OptimizerKind::rmsprop: rmsprop_update(*this, s, w, grad, out); break;
      case OptimizerKind::adagrad: adagrad_update(*this, s, w, grad, out); break;
    }
  }
  const size_t before = g.update_ops.size();
  Tensor increment = increment_global_step(loc);
  if (g.update_ops.size() > before) out.push_back(increment);
  return out;
}

std::string Optimizer::str() const {
  static const char* names[] = {"sgd", "momentum", "adam", "adamw", "rmsprop", "adagrad"};
  std::ostringstream o;
  o << names[static_cast<int>(kind)] << "(lr=" << learning_rate.str();
  switch (kind) {
    case OptimizerKind::sgd: break;
    case OptimizerKind::momentum: o << ", momentum=" << momentum << (nesterov ? ", nesterov" : ""); break;
    case OptimizerKind::adam:
    case OptimizerKind::adamw: o << ", betas=(" << beta1 << ", " << beta2 << "), eps=" << eps; break;
    case OptimizerKind::rmsprop:
      o << ", alpha=" << alpha << ", eps=" << eps << ", momentum=" << momentum
        << (centered ? ", centered" : "");
      break;
    case OptimizerKind::adagrad:
      o << ", lr_decay=" << lr_decay << ", initial_accumulator=" << initial_accumulator
        << ", eps=" << eps;
      break;
  }
  if (weight_decay != 0) o << ", weight_decay=" << weight_decay;
  if (clip_norm != 0) o << ", clip_by_global_norm=" << clip_norm;
  if (loss_scale)
    o << ", loss_scale=" << loss_scale->initial << " (x" << loss_scale->growth_factor << " after "
      << loss_scale->growth_interval << " finite steps, x" << loss_scale->backoff_factor << " on a skip)";
  o << ")";
  return o.str();
}

Optimizer sgd(Schedule lr, SgdOptions options) {
  return Optimizer{.kind = OptimizerKind::sgd, .learning_rate = std::move(lr),
                   .weight_decay = options.weight_decay};
}

Optimizer momentum(Schedule lr, double mu, MomentumOptions options) {
  return Optimizer{.kind = OptimizerKind::momentum, .learning_rate = std::move(lr),
                   .momentum = mu, .nesterov = options.nesterov,
                   .weight_decay = options.weight_decay};
}

Optimizer adam(Schedule lr, AdamOptions options) {
  return Optimizer{.kind = OptimizerKind::adam, .learning_rate = std::move(lr),
                   .beta1 = options.beta1, .beta2 = options.beta2, .eps = options.eps,
                   .weight_decay = options.weight_decay};
}

Optimizer adamw(Schedule lr, AdamWOptions options) {
  return Optimizer{.kind = OptimizerKind::adamw, .learning_rate = std::move(lr),
                   .beta1 = options.beta1, .beta2 = options.beta2, .eps = options.eps,
                   .weight_decay = options.weight_decay};
}

Optimizer rmsprop(Schedule lr, RmsPropOptions options) {
  return Optimizer{.kind = OptimizerKind::rmsprop, .learning_rate = std::move(lr),
                   .momentum = options.momentum, .alpha = options.alpha,
                   .centered = options.centered, .eps = options.eps,
                   .weight_decay = options.weight_decay};
}

Optimizer adagrad(Schedule lr, AdagradOptions options) {
  return Optimizer{.kind = OptimizerKind::adagrad, .learning_rate = std::move(lr),
                   .eps = options.eps, .lr_decay = options.lr_decay,
                   .initial_accumulator = options.initial_accumulator,
                   .weight_decay = options.weight_decay};
}

}  // namespace towerjit
