// TF's get_variable over Graph's variable table: a full name is looked up, and the scope's
// reuse decides whether finding it (or not finding it) is a mistake.
#include "dsl/variables.h"

#include "dsl/ops_internal.h"

namespace towerjit {

using detail::in_scope;

namespace {

const char* reuse_name(Reuse r) {
  switch (r) {
    case Reuse::inherit: return "Reuse::inherit";
    case Reuse::no: return "Reuse::no";
    case Reuse::yes: return "Reuse::yes";
    case Reuse::auto_reuse: return "Reuse::auto_reuse";
  }
  return "?";
}

void check_shape(const std::string& full, const Shape& shape, Loc loc) {
  for (int64_t d : shape.dims()) {
    user_check(d != kBatch, loc)
        << "variable \"" << full << "\": shape " << shape.str()
        << " contains the batch dimension B; a variable outlives every batch, so give it "
           "constant dimensions (e.g. the feature size, not the batch size)";
    user_check(d > 0, loc) << "variable \"" << full << "\": dimension " << d << " in "
                           << shape.str() << " must be positive";
  }
}

// The existing variable, checked against the request: reuse allowed, same shape and dtype.
Tensor reuse_existing(Graph& g, const VariableInfo& info, const Shape& shape, DType dtype,
                      Loc loc) {
  user_check(g.reuse() != Reuse::no, loc)
      << "variable \"" << info.name << "\" already exists" << in_scope(g) << ": it was first "
      << "created as " << dtype_name(info.dtype) << info.shape.str() << " at "
      << format_location(info.loc) << ". To share it (as towers do), build it inside "
      << "VariableScope(..., Reuse::yes) or Reuse::auto_reuse; otherwise choose another name";
  user_check(info.shape == shape, loc)
      << "variable name reused with another shape: \"" << info.name << "\" was created as "
      << info.shape.str() << " at " << format_location(info.loc) << " but is requested as "
      << shape.str() << in_scope(g)
      << ". A shared variable keeps one shape; check the layer's input size, or use another "
         "name for a different variable";
  user_check(info.dtype == dtype, loc)
      << "variable name reused with another dtype: \"" << info.name << "\" was created as "
      << dtype_name(info.dtype) << info.shape.str() << " at " << format_location(info.loc)
      << " but is requested as " << dtype_name(dtype) << shape.str() << in_scope(g)
      << ". Request the dtype it was created with, or use another name";
  return Tensor(&g, info.node);
}

}  // namespace

Tensor variable(const std::string& name, Shape shape, VariableOptions options, Loc loc) {
  Graph& g = Graph::current();
  user_check(!name.empty(), loc) << "variable: the name is empty" << in_scope(g)
                                 << "; give each variable a name, e.g. \"kernel\"";
  const std::string path = g.scope_path();
  const std::string full = path.empty() ? name : path + "/" + name;
  check_shape(full, shape, loc);
  if (const VariableInfo* info = g.find_variable(full))
    return reuse_existing(g, *info, shape, options.dtype, loc);
  user_check(g.reuse() != Reuse::yes, loc)
      << "variable \"" << full << "\" does not exist" << in_scope(g) << ", and the scope's "
      << reuse_name(g.reuse()) << " only returns existing variables. Build the layer "
      << "once without reuse first (the first tower), check the scope names match, or use "
         "Reuse::auto_reuse to create it when missing";
  Attrs attrs;
  attrs.name = full;
  Tensor t = detail::make(g, Op::Variable, {}, shape, options.dtype, attrs, loc);
  g.add_variable(VariableInfo{.name = full, .shape = std::move(shape), .dtype = options.dtype,
                              .init = options.init, .trainable = options.trainable,
                              .node = t.id(), .loc = loc});
  return t;
}

std::vector<Tensor> trainable_variables() {
  Graph& g = Graph::current();
  std::vector<Tensor> out;
  for (int id : g.trainable_variable_nodes()) out.emplace_back(&g, id);
  return out;
}

std::vector<Tensor> global_variables() {
  Graph& g = Graph::current();
  std::vector<Tensor> out;
  for (const VariableInfo& v : g.variables()) out.emplace_back(&g, v.node);
  return out;
}

std::vector<Tensor> update_ops() {
  Graph& g = Graph::current();
  std::vector<Tensor> out;
  for (int id : g.update_ops) out.emplace_back(&g, id);
  return out;
}

std::vector<Tensor> regularization_losses() {
  Graph& g = Graph::current();
  std::vector<Tensor> out;
  for (int id : g.regularization_losses) out.emplace_back(&g, id);
  return out;
}

void add_regularization_loss(Tensor loss, Loc loc) {
  user_check(loss.valid(), loc) << "add_regularization_loss: the loss is an empty tensor; "
                                << "pass a scalar built with an op, e.g. l2_loss(kernel)";
  Graph& g = loss.graph();
  user_check(loss.rank() == 0 && loss.dtype() == DType::f32, loc)
      << "add_regularization_loss: expects an f32 scalar but got " << loss.describe()
      << in_scope(g) << "; reduce it first, e.g. sum(x) or l2_loss(x)";
  g.regularization_losses.push_back(loss.id());
}

}  // namespace towerjit
