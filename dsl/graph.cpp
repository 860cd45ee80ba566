#include "dsl/graph.h"

#include <sstream>

#include "dsl/error.h"

namespace towerjit {

namespace {
thread_local Graph* current_graph = nullptr;
}

int Graph::add(Node node) {
  for (int in : node.inputs) internal_check(in >= 0 && in < size()) << "bad input id " << in;
  if (node.scope.empty()) node.scope = scope_path();  // passes copying nodes keep theirs
  if (node.grad_of < 0) node.grad_of = differentiating_;
  if (!node.stack && node.grad_of >= 0) node.stack = nodes_.at(node.grad_of).stack;
  if (node.op == Op::Input) inputs_[node.attrs.name] = size();
  nodes_.push_back(std::move(node));
  return size() - 1;
}

std::optional<int> Graph::find_input(const std::string& name) const {
  auto it = inputs_.find(name);
  if (it == inputs_.end()) return std::nullopt;
  return it->second;
}

std::vector<int> Graph::inputs() const {
  std::vector<int> ids;
  for (const auto& [name, id] : inputs_) ids.push_back(id);
  return ids;
}

const VariableInfo* Graph::find_variable(const std::string& name) const {
  auto it = variable_index_.find(name);
  return it == variable_index_.end() ? nullptr : &variables_[it->second];
}

const VariableInfo* Graph::variable_of_node(int node) const {
  const Node& n = nodes_.at(node);
  return n.op == Op::Variable ? find_variable(n.attrs.name) : nullptr;
}

void Graph::add_variable(VariableInfo info) {
  internal_check(!variable_index_.count(info.name)) << info.name;
  variable_index_[info.name] = static_cast<int>(variables_.size());
  variables_.push_back(std::move(info));
}

std::vector<int> Graph::trainable_variable_nodes() const {
  std::vector<int> ids;
  for (const auto& v : variables_)
    if (v.trainable) ids.push_back(v.node);
  return ids;
}

void Graph::push_scope(const std::string& name, Reuse reuse) {
  scopes_.push_back({name, reuse == Reuse::inherit ? this->reuse() : reuse});
}

void Graph::pop_scope() {
  internal_check(!scopes_.empty());
  scopes_.pop_back();
}

std::string Graph::scope_path() const {
  std::string path;
  for (const auto& s : scopes_) {
    if (s.name.empty()) continue;
    path += (path.empty() ? "" : "/") + s.name;
  }
  return path;
}

Reuse Graph::reuse() const { return scopes_.empty() ? Reuse::no : scopes_.back().reuse; }

namespace {

std::string list(const std::vector<int>& xs) {
  std::string s = "[";
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? "," : "") + std::to_string(xs[i]);
  return s + "]";
}

// (h, w) as "2", or "2x1" when the two differ.
std::string pair(const int (&hw)[2]) {
  return std::to_string(hw[0]) + (hw[0] == hw[1] ? "" : "x" + std::to_string(hw[1]));
}

// The attributes that tell two nodes of one op apart, as " key=value" pairs.
std::string attrs_str(const Node& n) {
  std::ostringstream out;
  const Attrs& a = n.attrs;
  switch (op_kind(n.op)) {
    case OpKind::Reduce:
      out << " axes=" << list(a.axes) << (a.keepdims ? " keepdims" : "");
      break;
    default:
      break;
  }
  switch (n.op) {
    case Op::Constant: out << " value=" << a.value; break;
    case Op::Transpose: out << " perm=" << list(a.axes); break;
    case Op::Count: out << " axes=" << list(a.axes); break;
    case Op::OneHot: out << " depth=" << a.depth; break;
    case Op::ArgMax: case Op::Concat: case Op::Iota: case Op::Gather: case Op::GatherGrad:
      out << " axis=" << a.axis << (a.dense_gradient ? " dense_gradient" : "");
      break;
    case Op::RandomUniform: out << " seed=" << a.seed; break;
    case Op::Attention: case Op::AttentionGradQ: case Op::AttentionGradKV:
      out << " scale=" << a.value << (a.causal ? " causal" : "");
      break;
    case Op::LayerNorm: case Op::LayerNormGradInput: case Op::LayerNormGradParams:
      out << " epsilon=" << a.value << (a.rms ? " rms" : "");
      break;
    case Op::Conv2D: case Op::Conv2DGradInput: case Op::Conv2DGradFilter:
      out << " stride=" << pair(a.stride) << " pad=" << pair(a.pad);
      break;
    case Op::MaxPool2D: case Op::MaxPool2DGrad: case Op::AvgPool2D: case Op::AvgPool2DGrad:
      out << " kernel=" << pair(a.kernel) << " stride=" << pair(a.stride) << " pad=" << pair(a.pad)
          << (a.relu_mask ? " relu_mask" : "");
      break;
    default:
      break;
  }
  return out.str();
}

}  // namespace

std::string Graph::node_str(int id) const {
  const Node& n = nodes_.at(id);
  std::ostringstream out;
  out << "%" << id << " = " << op_name(n.op) << "(";
  for (size_t i = 0; i < n.inputs.size(); ++i) out << (i ? ", " : "") << "%" << n.inputs[i];
  out << ")";
  if (!n.attrs.name.empty()) out << " \"" << n.attrs.name << "\"";
  out << attrs_str(n);
  out << " : " << dtype_name(n.dtype) << n.shape.str();
  out << "  @ " << format_location(n);
  if (!n.scope.empty()) out << " in \"" << n.scope << "\"";
  if (n.grad_of >= 0) out << ", gradient of %" << n.grad_of << " " << op_name(nodes_.at(n.grad_of).op);
  return out.str();
}

std::string Graph::str() const {
  std::string s;
  for (int i = 0; i < size(); ++i) s += node_str(i) + "\n";
  return s;
}

Graph& Graph::current() {
  if (current_graph) return *current_graph;
  thread_local Graph default_graph;
  return default_graph;
}

GraphScope::GraphScope(Graph& graph) : previous_(current_graph) { current_graph = &graph; }
GraphScope::~GraphScope() { current_graph = previous_; }

VariableScope::VariableScope(const std::string& name, Reuse reuse) : graph_(&Graph::current()) {
  graph_->push_scope(name, reuse);
}
VariableScope::~VariableScope() { graph_->pop_scope(); }

}  // namespace towerjit
