// run(): which nodes the fetches need, the batch size from the feeds, the checks of feeds and
// variables, then every needed node in id order (ids are topological) through one dispatch.
#include "jit/reference/interpreter.h"

#include <optional>

#include "dsl/error.h"
#include "dsl/half_float.h"
#include "jit/reference/eval.h"

namespace towerjit::reference {

Variables initialize_variables(const Graph& graph, uint64_t seed) {
  Variables out;
  for (const VariableInfo& info : graph.variables()) {
    if (info.init.kind == Initializer::Kind::copy) {
      // Variables are initialised in declaration order, so the source is already drawn.
      auto source = out.find(info.init.source);
      user_check(source != out.end() && source->second.shape == info.shape, info.loc)
          << "variable \"" << info.name << "\" is initialised as " << info.init.str()
          << " but no variable of that name and shape " << info.shape.str()
          << " was declared before it; declare the source first";
      out[info.name] = source->second;
      continue;
    }
    // In double: a constant keeps the user's value; f32 backends round it once (to_host).
    std::vector<double> values =
        initial_values(info.init, info.shape, seed, stable_hash(info.name));
    internal_check(static_cast<int64_t>(values.size()) == info.shape.elements(0))
        << info.name << ": initial_values gave " << values.size() << " values for "
        << info.shape.str();
    // bf16 / f16 variables start at their initial values rounded once (to nearest even).
    if (is_half_float(info.dtype))
      for (double& v : values) v = round_to(info.dtype, v);
    out[info.name] = Array(info.shape, std::move(values), info.dtype);
  }
  return out;
}

namespace {

std::string where_in(const Node& node) {
  return node.scope.empty() ? "" : " in \"" + node.scope + "\"";
}

std::string declared(const Node& node) {
  return std::string(dtype_name(node.dtype)) + node.shape.str();
}

std::string fed(const Array& a) { return std::string(dtype_name(a.dtype)) + a.shape.str(); }

// needed[id]: node id is a fetch, an update op (when they run) or an input of a needed node.
std::vector<bool> needed_nodes(const Graph& graph, const std::vector<int>& roots) {
  std::vector<bool> needed(graph.size(), false);
  for (int id : roots) needed.at(id) = true;
  // Inputs have smaller ids, so one pass from the back reaches everything.
  for (int id = graph.size() - 1; id >= 0; --id)
    if (needed[id])
      for (int in : graph.node(id).inputs) needed[in] = true;
  return needed;
}

// Checks one fed value against its input's declaration; returns the batch size it implies.
std::optional<int64_t> check_feed(const Node& node, const Array& value) {
  const std::string& name = node.attrs.name;
  const Shape& want = node.shape;
  user_check(value.dtype == node.dtype && value.shape.rank() == want.rank(), node)
      << "input \"" << name << "\" is declared " << declared(node) << where_in(node)
      << " but was fed " << fed(value) << "; feed a value of that rank and dtype";
  user_check(value.size() == value.shape.elements(0), node)
      << "input \"" << name << "\": the fed array has shape " << value.shape.str() << " but "
      << value.size() << " elements; its data must hold exactly one value per element";
  std::optional<int64_t> batch;
  for (int i = 0; i < want.rank(); ++i) {
    const int64_t got = value.shape[i];
    if (want[i] != kBatch) {
      user_check(got == want[i], node)
          << "input \"" << name << "\" is declared " << declared(node) << where_in(node)
          << " but was fed " << fed(value) << ": dimension " << i << " should be " << want[i]
          << ", not " << got;
      continue;
    }
    user_check(!batch || *batch == got, node)
        << "input \"" << name << "\" is declared " << declared(node) << " but was fed "
        << fed(value) << ", which gives the batch dimension B two sizes, " << *batch << " and "
        << got;
    batch = got;
  }
  return batch;
}

// Checks every fed input against its declaration (and that every needed input is fed), and
// returns the batch size they agree on. Fed inputs the fetches do not need still bind B: a
// gradient of zeros shaped [B,3] depends on no input, yet the run's batch is what was fed.
std::optional<int64_t> bind_batch(const Graph& graph, const std::vector<bool>& needed,
                                  const Feeds& feeds) {
  std::optional<int64_t> batch;
  int batch_from = -1;
  for (int id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (node.op != Op::Input) continue;
    auto it = feeds.find(node.attrs.name);
    if (!needed[id] && it == feeds.end()) continue;
    user_check(it != feeds.end(), node)
        << "input \"" << node.attrs.name << "\" (" << declared(node) << where_in(node)
        << ") is needed by the fetches but was not fed; add feeds[\"" << node.attrs.name
        << "\"]";
    const std::optional<int64_t> b = check_feed(node, it->second);
    if (!b) continue;
    if (batch) {
      const Node& first = graph.node(batch_from);
      user_check(*batch == *b, node)
          << "inputs \"" << first.attrs.name << "\" and \"" << node.attrs.name
          << "\" disagree on the batch size B: \"" << first.attrs.name << "\" "
          << declared(first) << " was fed " << fed(feeds.at(first.attrs.name)) << " (B = "
          << *batch << ") but \"" << node.attrs.name << "\" " << declared(node) << " was fed "
          << fed(it->second) << " (B = " << *b << "); feed the same number of examples to both";
    } else {
      batch = b;
      batch_from = id;
    }
  }
  return batch;
}

void check_variables(const Graph& graph, const std::vector<bool>& needed,
                     const Variables& variables) {
  for (int id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (!needed[id] || node.op != Op::Variable) continue;
    const std::string& name = node.attrs.name;
    const VariableInfo* info = graph.find_variable(name);
    const Shape& want = info ? info->shape : node.shape;
    auto it = variables.find(name);
    user_check(it != variables.end(), node)
        << "variable \"" << name << "\" (" << dtype_name(node.dtype) << want.str()
        << ") is needed by the fetches but is missing from the variables; "
        << "start from initialize_variables(graph, seed)";
    const Array& v = it->second;
    user_check(v.shape == want && v.dtype == node.dtype && v.size() == want.elements(0),
               node.loc)
        << "variable \"" << name << "\" is declared " << dtype_name(node.dtype) << want.str()
        << " but the value held for it is " << fed(v) << " with " << v.size()
        << " elements; pass the variables this graph was initialised with";
  }
}

void check_batch_known(const Graph& graph, int id, std::optional<int64_t> batch) {
  const Node& node = graph.node(id);
  const bool uses_batch = node.shape.has_batch() || node.attrs.shape.has_batch();
  user_check(batch.has_value() || !uses_batch, node)
      << "batch size unknown: " << op_name(node.op) << " has shape " << node.shape.str()
      << where_in(node) << " but no fed input holds the batch dimension B; feed an input "
      << "declared with kBatch";
}

// A fed or held value as its dtype stores it: a bf16 / f16 value rounded as a backend's 16-bit
// storage holds it (callers may pass any doubles).
Array as_stored(const Array& value) {
  if (!is_half_float(value.dtype)) return value;
  Array out = value;
  for (double& v : out.data) v = round_to(value.dtype, v);
  return out;
}

Array evaluate(const EvalArgs& a, const Feeds& feeds, const Variables& variables) {
  switch (a.node.op) {
    case Op::Input: return as_stored(feeds.at(a.node.attrs.name));
    case Op::Variable: return as_stored(variables.at(a.node.attrs.name));
    case Op::Constant: return eval_constant(a);
    case Op::Iota: return eval_iota(a);
    case Op::Neg: case Op::Exp: case Op::Log: case Op::Sqrt: case Op::Rsqrt: case Op::Abs:
    case Op::Sign: case Op::Relu: case Op::Sigmoid: case Op::Tanh: case Op::Erf: case Op::Gelu:
    case Op::GeluGrad: case Op::Softplus: case Op::Cast: case Op::StopGradient:
      return eval_unary(a);
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Max: case Op::Min:
    case Op::Pow: case Op::Less: case Op::LessEqual: case Op::Greater: case Op::GreaterEqual:
    case Op::Equal: case Op::NotEqual:
      return eval_binary(a);
    case Op::Select: return eval_select(a);
    case Op::PhaseSelect: return a.in(0);  // the graph as built trains (dsl/phase.h)
    case Op::ReduceSum: case Op::ReduceMean: case Op::ReduceMax:
    case Op::ReduceLogSumExp: return eval_reduce(a);
    case Op::Count: return eval_count(a);
    case Op::Reshape: return eval_reshape(a);
    case Op::Transpose: return eval_transpose(a);
    case Op::BroadcastTo: return eval_broadcast_to(a);
    case Op::Slice: return eval_slice(a);
    case Op::Pad: return eval_pad(a);
    case Op::Concat: return eval_concat(a);
    case Op::MatMul: return eval_matmul(a);
    case Op::OneHot: return eval_one_hot(a);
    case Op::ArgMax: return eval_argmax(a);
    case Op::Gather: return eval_gather(a);
    case Op::GatherGrad: return eval_gather_grad(a);
    case Op::CombineRows: return eval_combine_rows(a);
    case Op::ScatterRows: return eval_scatter_rows(a);
    case Op::Attention: return eval_attention(a);
    case Op::AttentionGradQ: return eval_attention_grad_q(a);
    case Op::AttentionGradKV: return eval_attention_grad_kv(a);
    case Op::LayerNorm: return eval_layer_norm(a);
    case Op::LayerNormGradInput: return eval_layer_norm_grad_input(a);
    case Op::LayerNormGradParams: return eval_layer_norm_grad_params(a);
    case Op::Softmax: return eval_softmax(a);
    case Op::SoftmaxGrad: return eval_softmax_grad(a);
    // A convolution of bf16 / f16 operands stores its result in their dtype (cuDNN's 16-bit
    // configurations): the exact sum, rounded once.
    case Op::Conv2D: return as_stored(eval_conv2d(a));
    case Op::Conv2DGradInput: return as_stored(eval_conv2d_grad_input(a));
    case Op::Conv2DGradFilter: return as_stored(eval_conv2d_grad_filter(a));
    case Op::MaxPool2D: return eval_max_pool2d(a);
    case Op::MaxPool2DGrad: return eval_max_pool2d_grad(a);
    case Op::AvgPool2D: return eval_avg_pool2d(a);
    case Op::AvgPool2DGrad: return eval_avg_pool2d_grad(a);
    case Op::RandomUniform: return eval_random_uniform(a);
    case Op::Assign: return eval_assign(a);
    case Op::AllReduce: return a.in(0);  // one device: the towers' combination of one tower
  }
  internal_check(false) << "no reference evaluation for op " << static_cast<int>(a.node.op);
  return {};
}

// Each evaluated Assign's value becomes its variable's next value; all reads are done by now.
void write_updates(const Graph& graph, const std::vector<bool>& needed,
                   const std::vector<Array>& values, Variables& variables) {
  for (int id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (!needed[id] || node.op != Op::Assign) continue;
    const Node& var = graph.node(node.inputs.at(0));
    internal_check(var.op == Op::Variable) << "assign %" << id << " targets a "
                                           << op_name(var.op);
    Array& target = variables.at(var.attrs.name);
    const Array& value = values[id];
    internal_check(value.size() == target.size())
        << "assign to \"" << var.attrs.name << "\": " << value.shape.str() << " into "
        << target.shape.str();
    target.data = value.data;
  }
}

// The bound of every variable's value after the run: an assigned one's is its new value's, any
// other's what rounding to float32 does to it.
Variables variable_bounds(const Graph& graph, const std::vector<bool>& needed, bool updates,
                          const Variables& variables, const std::vector<Array>& bounds) {
  Variables out;
  for (const auto& [name, value] : variables) out[name] = float_rounding_bound(value);
  for (int id = 0; updates && id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (needed[id] && node.op == Op::Assign)
      out.at(graph.node(node.inputs.at(0)).attrs.name).data = bounds[id].data;
  }
  return out;
}

}  // namespace

std::vector<Array> run(const Graph& graph, const std::vector<Tensor>& fetches, const Feeds& feeds,
                       Variables& variables, RunOptions options) {
  std::vector<int> roots;
  for (const Tensor& t : fetches) {
    if (!t.valid() || &t.graph() != &graph)
      throw Error("towerjit: run: fetch " + std::to_string(roots.size()) +
                  (t.valid() ? " belongs to another graph" : " is an empty tensor") +
                  "; fetch tensors built in the graph being run");
    roots.push_back(t.id());
  }
  if (options.run_update_ops) roots.insert(roots.end(), graph.update_ops.begin(),
                                           graph.update_ops.end());
  const std::vector<bool> needed = needed_nodes(graph, roots);
  const std::optional<int64_t> batch = bind_batch(graph, needed, feeds);
  check_variables(graph, needed, variables);

  std::vector<Array> values(graph.size()), bounds(options.bounds ? graph.size() : 0);
  for (int id = 0; id < graph.size(); ++id) {
    if (!needed[id]) continue;
    check_batch_known(graph, id, batch);
    const Node& node = graph.node(id);
    EvalArgs args{.node = node, .inputs = {}, .shape = node.shape.bind(batch.value_or(0)),
                  .batch = batch.value_or(0), .step = options.step, .tf32_products = options.tf32_products};
    for (int in : node.inputs) args.inputs.push_back(&values[in]);
    values[id] = evaluate(args, feeds, variables);
    internal_check(values[id].shape == args.shape && values[id].dtype == node.dtype &&
                   values[id].size() == args.shape.elements(0))
        << graph.node_str(id) << " evaluated to " << fed(values[id]) << " with "
        << values[id].size() << " elements";
    if (options.bounds) {
      std::vector<const Array*> input_bounds;
      for (int in : node.inputs) input_bounds.push_back(&bounds[in]);
      bounds[id] = error_bound(args, input_bounds, values[id]);
    }
  }

  std::vector<Array> out;
  for (const Tensor& t : fetches) out.push_back(values[t.id()]);
  if (options.bounds) {
    options.bounds->fetches.clear();
    for (const Tensor& t : fetches) options.bounds->fetches.push_back(bounds[t.id()]);
    options.bounds->variables = variable_bounds(graph, needed, options.run_update_ops, variables, bounds);
  }
  if (options.run_update_ops) write_updates(graph, needed, values, variables);
  return out;
}

}  // namespace towerjit::reference
