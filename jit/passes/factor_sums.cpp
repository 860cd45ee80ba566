#include "jit/passes/factor_sums.h"

#include <algorithm>

namespace towerjit {
namespace {

constexpr size_t kMaxTerms = 8;  // a summand of more terms is left as written

// One term of a summand: sign * product(invariant) * product(varying).
struct Term {
  int sign = 1;
  std::vector<int> invariant, varying;
};

// Splits the summand of a reduction over `axes` of a tensor of shape `full` into terms.
class Summand {
 public:
  Summand(const Graph& g, const Shape& full, const std::vector<int>& axes) : g_(g), full_(full), axes_(axes) {}

  // False where the summand is not a sum of products this pass can take apart.
  bool expand(int id, int sign, std::vector<Term>& terms) const {
    const Node& n = g_.node(id);
    if (n.op == Op::Neg && is_full(n.inputs[0])) return expand(n.inputs[0], -sign, terms);
    if ((n.op == Op::Add || n.op == Op::Sub) && is_full(n.inputs[0]) && is_full(n.inputs[1]))
      return expand(n.inputs[0], sign, terms) && expand(n.inputs[1], n.op == Op::Sub ? -sign : sign, terms);
    Term t{sign, {}, {}};
    factors(id, t);
    terms.push_back(std::move(t));
    return terms.size() <= kMaxTerms;
  }

 private:
  bool is_full(int id) const { return g_.node(id).shape == full_ && g_.node(id).dtype == DType::f32; }

  // Extent 1 on every summed axis, numpy's trailing alignment against `full`.
  bool constant_along_axes(const Shape& s) const {
    const int pad = full_.rank() - s.rank();
    if (pad < 0) return false;
    for (int a : axes_)
      if (a >= pad && s[a - pad] != 1) return false;
    return true;
  }

  // The value a factor multiplies by where it does not vary along the axes (the factor, or what
  // a broadcast_to spreads over them), else -1.
  int invariant(int id) const {
    const Node& n = g_.node(id);
    if (n.dtype != DType::f32) return -1;
    if (n.shape != full_ && constant_along_axes(n.shape)) return id;
    if (n.op == Op::BroadcastTo && g_.node(n.inputs[0]).dtype == DType::f32 &&
        constant_along_axes(g_.node(n.inputs[0]).shape))
      return n.inputs[0];
    return -1;
  }

  void factors(int id, Term& t) const {
    const Node& n = g_.node(id);
    const bool splits = n.op == Op::Mul && is_full(id) &&
                        std::all_of(n.inputs.begin(), n.inputs.end(),
                                    [&](int in) { return invariant(in) >= 0 || is_full(in); });
    if (!splits) {
      t.varying.push_back(id);
      return;
    }
    for (int in : n.inputs) {
      if (const int c = invariant(in); c >= 0) t.invariant.push_back(c);
      else factors(in, t);
    }
  }

  const Graph& g_;
  const Shape& full_;
  const std::vector<int>& axes_;
};

// A node like `like` (its place in the user's program) computing op(inputs) of `shape`.
int add_like(Graph& out, const Node& like, Op op, std::vector<int> inputs, const Shape& shape) {
  Node n = like;
  n.op = op;
  n.inputs = std::move(inputs);
  n.shape = shape;
  n.attrs = Attrs{};
  return out.add(std::move(n));
}

}  // namespace

Rewritten factor_sums(const Graph& graph) {
  return rewrite_graph(graph, [&](Node n, Graph& out) {
    if ((n.op != Op::ReduceSum && n.op != Op::ReduceMean) || n.dtype != DType::f32) return out.add(std::move(n));
    const Shape full = out.node(n.inputs[0]).shape;
    std::vector<Term> terms;
    const Summand summand(out, full, n.attrs.axes);
    if (!summand.expand(n.inputs[0], 1, terms)) return out.add(std::move(n));
    const bool gains = std::any_of(terms.begin(), terms.end(), [](const Term& t) { return !t.invariant.empty(); });
    const bool each_varies = std::all_of(terms.begin(), terms.end(), [](const Term& t) { return !t.varying.empty(); });
    if (!gains || !each_varies) return out.add(std::move(n));
    // Each term's reduction keeps the reduced axes, so its factors broadcast against it as they
    // did against the summand; a reduction that drops them reshapes the total at the end.
    Shape kept = full;
    for (int a : n.attrs.axes) kept[a] = 1;
    int total = -1;
    for (const Term& t : terms) {
      int varying = t.varying[0];
      for (size_t i = 1; i < t.varying.size(); ++i) varying = add_like(out, n, Op::Mul, {varying, t.varying[i]}, full);
      Node reduce = n;
      reduce.inputs = {varying};
      reduce.shape = kept;
      reduce.attrs.keepdims = true;
      int term = out.add(std::move(reduce));
      for (int c : t.invariant) term = add_like(out, n, Op::Mul, {term, c}, kept);
      if (total < 0) total = t.sign > 0 ? term : add_like(out, n, Op::Neg, {term}, kept);
      else total = add_like(out, n, t.sign > 0 ? Op::Add : Op::Sub, {total, term}, kept);
    }
    return n.attrs.keepdims ? total : add_like(out, n, Op::Reshape, {total}, n.shape);
  });
}

}  // namespace towerjit
