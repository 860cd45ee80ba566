// Each sparse update reads the rows a gather touched (gather_rows), computes on those rows as
// the dense optimiser does, and writes them back (scatter_rows, in place in the variable).
// The combined rows (combine_rows) are the dense gradient's rows bitwise, so SGD and Adagrad
// compute exactly what their dense forms compute; momentum adds the dense decay of every row.
#include "dsl/optimizers_sparse.h"

#include "dsl/ops_internal.h"
#include "dsl/state.h"

namespace towerjit::detail {

namespace {

Tensor slot(Tensor w, const char* name, Loc loc, Initializer init = init::zeros()) {
  return state_variable(w.graph(), w.node().attrs.name + "/" + name, w.shape(), init, loc);
}

// `base` with the gradient's rows replaced by f(base's rows): the rows-only update.
template <class F>
Tensor on_rows(Tensor base, const SparseGradient& g, Loc loc, F f) {
  return scatter_rows(base, g, f(gather_rows(base, g, loc)), loc);
}

// torch.optim.SGD (dampening 0). Momentum's velocity decays on every row, touched or not, as
// the dense form's does: buf = mu buf is a dense elementwise pass (written in place in the
// slot), the touched rows mu buf + g; w -= lr buf is dense too. No table-sized gradient is
// built, only the passes over the weights and the slot that dense momentum makes anyway.
void sgd(const Optimizer& o, Tensor lr, Tensor w, const SparseGradient& g, Tensor rows_g,
         std::vector<Tensor>& out, Loc loc) {
  if (o.kind == OptimizerKind::sgd) {
    out.push_back(assign(w, on_rows(w, g, loc, [&](Tensor r) { return sub(r, mul(lr, rows_g, loc), loc); }), loc));
    return;
  }
  Tensor buf = slot(w, "momentum", loc);
  // The touched rows as the dense kernel computes them (mu buf_r + g_r, one expression, so a
  // backend that fuses it into a multiply-add does so on both paths), read before the dense
  // decay overwrites the slot in place; every other row mu buf.
  Tensor touched = add(mul(o.momentum, gather_rows(buf, g, loc), loc), rows_g, loc);
  Tensor buf1 = scatter_rows(mul(o.momentum, buf, loc), g, touched, loc);
  out.push_back(assign(buf, buf1, loc));
  if (!o.nesterov) {
    out.push_back(assign(w, sub(w, mul(lr, buf1, loc), loc), loc));
    return;
  }
  // w -= lr (g + mu buf): the touched rows as the dense kernel computes them, read before the
  // dense pass (every other row: w -= lr (mu buf), the dense form with g = 0) overwrites w.
  Tensor w_touched = sub(gather_rows(w, g, loc), mul(lr, add(rows_g, mul(o.momentum, touched, loc), loc), loc), loc);
  Tensor moved = sub(w, mul(lr, mul(o.momentum, buf1, loc), loc), loc);
  out.push_back(assign(w, scatter_rows(moved, g, w_touched, loc), loc));
}

// torch.optim.SparseAdam: the moments of the touched rows only (lazy), and its step:
// w -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps).
void sparse_adam(const Optimizer& o, Tensor lr, Tensor t, Tensor w, const SparseGradient& g, Tensor rows_g,
                 std::vector<Tensor>& out, Loc loc) {
  Tensor m = slot(w, "adam_m", loc), v = slot(w, "adam_v", loc);
  // old + (1 - b) (new - old), SparseAdam's form of b old + (1 - b) new.
  Tensor m_rows = gather_rows(m, g, loc), v_rows = gather_rows(v, g, loc);
  Tensor m1 = add(m_rows, mul(1.0 - o.beta1, sub(rows_g, m_rows, loc), loc), loc);
  Tensor v1 = add(v_rows, mul(1.0 - o.beta2, sub(mul(rows_g, rows_g, loc), v_rows, loc), loc), loc);
  out.push_back(assign(m, scatter_rows(m, g, m1, loc), loc));
  out.push_back(assign(v, scatter_rows(v, g, v1, loc), loc));
  Tensor bias1 = one_minus_power(o.beta1, t, loc), bias2 = one_minus_power(o.beta2, t, loc);
  Tensor step_size = div(mul(lr, sqrt(bias2, loc), loc), bias1, loc);
  Tensor denom = add(sqrt(v1, loc), o.eps, loc);
  out.push_back(assign(w, on_rows(w, g, loc, [&](Tensor r) {
                         return sub(r, mul(step_size, div(m1, denom, loc), loc), loc);
                       }), loc));
}

// torch.optim.Adagrad: a row with no gradient keeps its sum and its weight, so the rows-only
// update is the dense one exactly.
void adagrad(const Optimizer& o, Tensor lr, Tensor t, Tensor w, const SparseGradient& g, Tensor rows_g,
             std::vector<Tensor>& out, Loc loc) {
  Tensor acc = slot(w, "adagrad_sum", loc, init::constant(o.initial_accumulator));
  Tensor acc1 = add(gather_rows(acc, g, loc), mul(rows_g, rows_g, loc), loc);
  out.push_back(assign(acc, scatter_rows(acc, g, acc1, loc), loc));
  Tensor clr = lr;
  if (o.lr_decay != 0) clr = div(lr, add(1.0, mul(sub(t, 1.0, loc), o.lr_decay, loc), loc), loc);
  Tensor denom = add(sqrt(acc1, loc), o.eps, loc);
  out.push_back(assign(w, on_rows(w, g, loc, [&](Tensor r) {
                         return sub(r, mul(clr, div(rows_g, denom, loc), loc), loc);
                       }), loc));
}

}  // namespace

namespace {

// Why `o` cannot apply a sparse gradient, or null when it can.
const char* why_not_sparse(const Optimizer& o) {
  if (o.kind == OptimizerKind::rmsprop)
    return "rmsprop decays every row's squared-gradient average at every step, which a sparse apply "
           "cannot do";
  if (o.weight_decay != 0) return "weight decay reads every row of the weight at every step, so the gradient is not sparse";
  if (o.clip_norm != 0) return "clipping by global norm is not computed from a sparse gradient's rows";
  if (o.loss_scale) return "loss scaling unscales and checks every gradient densely";
  return nullptr;
}

}  // namespace

bool can_apply_sparse(const Optimizer& o) { return why_not_sparse(o) == nullptr; }

bool sparse_apply_changes_only_its_rows(const Optimizer& o) {
  return can_apply_sparse(o) && o.kind != OptimizerKind::momentum;
}

void check_sparse_apply(const Optimizer& o, const Tensor& w, Loc loc) {
  const char* why = why_not_sparse(o);
  if (!why) return;
  user_check(false, loc) << "optimizer apply: variable \"" << w.node().attrs.name << "\" (created at "
                         << format_location(w.node()) << ") has a sparse gradient (the rows its gather "
                         << "read) but " << o.str() << " cannot apply it: " << why << "; create it "
                         << "with sparse = false (embedding(..., {.sparse = false}) or gather(table, "
                         << "ids, 0, false)) for a dense gradient";
}

void sparse_apply(const Optimizer& o, Tensor lr, Tensor t, Tensor w, const SparseGradient& g,
                  std::vector<Tensor>& out, Loc loc) {
  check_sparse_apply(o, w, loc);
  const Tensor rows_g = combine_rows(g, loc);
  switch (o.kind) {
    case OptimizerKind::sgd:
    case OptimizerKind::momentum: return sgd(o, lr, w, g, rows_g, out, loc);
    case OptimizerKind::adam:
    case OptimizerKind::adamw: return sparse_adam(o, lr, t, w, g, rows_g, out, loc);  // no decay: checked
    case OptimizerKind::adagrad: return adagrad(o, lr, t, w, g, rows_g, out, loc);
    case OptimizerKind::rmsprop: break;  // refused by check_sparse_apply
  }
}

}  // namespace towerjit::detail
