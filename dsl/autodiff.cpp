// Reverse-mode autodiff. Node ids are a topological order (inputs have smaller ids), so walking
// from the loss down in decreasing id visits a node only after every consumer has added its
// part of the node's gradient: each gradient is complete when it is passed on.
#include "dsl/autodiff.h"

#include "dsl/grad_rules.h"
#include "dsl/sparse_gradients.h"

namespace towerjit {

using namespace detail;

namespace {

void check_arguments(const Tensor& loss, const std::vector<Tensor>& wrt, Loc loc) {
  user_check(loss.valid(), loc) << "grad: the loss is an empty tensor; pass the tensor your "
                                << "loss expression returned";
  const bool scalar = loss.rank() == 0;
  user_check(scalar && loss.dtype() == DType::f32, loc)
      << "grad: the loss must be an f32 scalar but got " << loss.describe() << " built at "
      << format_location(loss.node())
      << (loss.node().scope.empty() ? "" : " in \"" + loss.node().scope + "\"")
      << (scalar ? "; convert it with cast(loss, DType::f32)"
                 : "; reduce it with mean() or sum() to one number first");
  for (size_t i = 0; i < wrt.size(); ++i) {
    const Tensor& x = wrt[i];
    user_check(x.valid(), loc) << "grad: wrt[" << i << "] is an empty tensor; pass the "
                               << "variables or tensors the loss was built from";
    user_check(&x.graph() == &loss.graph(), loc)
        << "grad: wrt[" << i << "] " << x.describe() << " belongs to another graph than the "
        << "loss " << loss.describe() << "; build the model and its loss in one graph";
    user_check(x.dtype() == DType::f32, loc)
        << "grad: wrt[" << i << "] " << x.describe() << " built at "
        << format_location(x.node()) << " is " << dtype_name(x.dtype())
        << "; only f32 tensors have gradients";
  }
}

// needed[i]: node i lies on a path from some wrt to the loss whose every edge carries gradient.
// Gradients are built for these nodes only, so nothing is spent on inputs, labels or frozen
// parts of the model.
std::vector<bool> nodes_on_path(const Graph& graph, int loss, const std::vector<Tensor>& wrt) {
  const int n = loss + 1;
  std::vector<bool> from_wrt(n, false), to_loss(n, false), needed(n, false);
  for (const Tensor& x : wrt)
    if (x.id() < n) from_wrt[x.id()] = true;
  for (int i = 0; i < n; ++i) {
    const Node& node = graph.node(i);
    for (size_t k = 0; k < node.inputs.size() && !from_wrt[i]; ++k)
      from_wrt[i] = from_wrt[node.inputs[k]] && passes_gradient(graph, node, static_cast<int>(k));
  }
  to_loss[loss] = true;
  for (int i = loss; i >= 0; --i) {
    if (!to_loss[i]) continue;
    const Node& node = graph.node(i);
    for (size_t k = 0; k < node.inputs.size(); ++k)
      if (passes_gradient(graph, node, static_cast<int>(k))) to_loss[node.inputs[k]] = true;
  }
  for (int i = 0; i < n; ++i) needed[i] = from_wrt[i] && to_loss[i];
  return needed;
}

// While it lives, the nodes built name forward node `id` as what they differentiate, under TF's
// "gradients/<its scope>" scope, so a dump or an error tells a block's backward kernels apart.
class Differentiating {
 public:
  Differentiating(Graph& graph, int id) : graph_(graph) {
    const std::string& scope = graph.node(id).scope;
    graph.push_scope(scope.empty() ? "gradients" : "gradients/" + scope, Reuse::inherit);
    graph.set_differentiating(id);
  }
  ~Differentiating() {
    graph_.set_differentiating(-1);
    graph_.pop_scope();
  }

 private:
  Graph& graph_;
};

// Passes the complete gradient of node `id` on to its needed inputs, adding it to what they
// have received so far.
void propagate(Graph& graph, int id, std::vector<Tensor>& grads, const std::vector<bool>& needed,
               Loc loc) {
  GradContext c{.graph = graph, .node = graph.node(id), .y = Tensor(&graph, id), .x = {},
                .dy = grads[id], .want = {}, .grad_loc = loc};
  bool any = false;
  for (size_t k = 0; k < c.node.inputs.size(); ++k) {
    const int in = c.node.inputs[k];
    c.x.emplace_back(&graph, in);
    c.want.push_back(needed[in] && passes_gradient(graph, c.node, static_cast<int>(k)));
    any = any || c.want.back();
  }
  if (!any) return;  // a wrt that is a leaf, or whose inputs lead to no other wrt
  const Differentiating differentiating(graph, id);
  const std::vector<Tensor> dx = backward(c);
  for (size_t k = 0; k < dx.size(); ++k) {
    if (!c.want[k]) continue;
    const int in = c.node.inputs[k];
    internal_check(dx[k].valid() && dx[k].shape() == c.x[k].shape())
        << "gradient of " << op_name(c.node.op) << " input " << k << " is "
        << dx[k].describe() << ", expected the shape " << c.x[k].shape().str();
    // The sum is the gradient of the input node, so it points at where that node was built.
    const Loc input_loc = graph.node(in).loc;
    grads[in] = grads[in].valid() ? add_gradients(grads[in], dx[k], input_loc) : dx[k];
  }
}

Tensor filled(Graph& graph, double value, const Shape& shape, Loc loc) {
  Attrs attrs;
  attrs.value = value;
  return make(graph, Op::Constant, {}, shape, DType::f32, attrs, loc);
}

}  // namespace

std::vector<Tensor> grad(Tensor loss, const std::vector<Tensor>& wrt, Loc loc) {
  check_arguments(loss, wrt, loc);
  Graph& graph = loss.graph();
  GraphScope scope(graph);  // constants the rules build land in the loss's graph
  const int last = loss.id();
  const std::vector<bool> needed = nodes_on_path(graph, last, wrt);
  std::vector<Tensor> grads(last + 1);
  if (needed[last]) grads[last] = filled(graph, 1.0, Shape{}, graph.node(last).loc);
  for (int id = last; id >= 0; --id)
    if (needed[id] && grads[id].valid()) propagate(graph, id, grads, needed, loc);

  std::vector<Tensor> out;
  for (const Tensor& x : wrt) {
    if (x.id() <= last && grads[x.id()].valid()) {
      out.push_back(grads[x.id()]);
      continue;
    }
    // The loss does not depend on x: its gradient is zero, of x's shape.
    const Shape shape = x.shape();
    out.push_back(filled(graph, 0.0, shape, x.node().loc));
  }
  return out;
}

}  // namespace towerjit
