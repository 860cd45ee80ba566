// A graph: nodes in topological order (a node's inputs always have smaller ids), the variables
// it declares, the collections the seed designs use (trainable variables, update ops,
// regularisation losses), and the name-scope stack layers build under.
#pragma once

#include <map>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "dsl/initializer.h"
#include "dsl/node.h"

namespace towerjit {

// Whether a scope may hand out variables that already exist (how towers share weights).
enum class Reuse { inherit, no, yes, auto_reuse };

struct VariableInfo {
  std::string name;  // full name, "fc1/kernel"
  Shape shape;       // constant dimensions only
  DType dtype = DType::f32;
  Initializer init;
  bool trainable = true;
  int node = -1;
  std::source_location loc;  // where it was first created
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  // Appends a node and returns its id. A node without a scope gets the current scope path,
  // and one without grad_of the forward node being differentiated, if any (and that node's
  // call stack).
  int add(Node node);
  // The forward node whose gradient rule is building nodes now (autodiff), or -1.
  void set_differentiating(int forward) { differentiating_ = forward; }
  int differentiating() const { return differentiating_; }
  const Node& node(int id) const { return nodes_.at(id); }
  const std::vector<Node>& nodes() const { return nodes_; }
  int size() const { return static_cast<int>(nodes_.size()); }

  // Named inputs: one node per name.
  std::optional<int> find_input(const std::string& name) const;
  std::vector<int> inputs() const;

  const std::vector<VariableInfo>& variables() const { return variables_; }
  const VariableInfo* find_variable(const std::string& name) const;
  const VariableInfo* variable_of_node(int node) const;
  // Registers a new variable (its node must already exist).
  void add_variable(VariableInfo info);

  std::vector<int> trainable_variable_nodes() const;
  std::vector<int> update_ops;             // Assign nodes the training step must run
  std::vector<int> regularization_losses;  // scalar nodes to add to the loss

  // Name scopes; Reuse::inherit takes the enclosing scope's reuse (no at the top).
  void push_scope(const std::string& name, Reuse reuse);
  void pop_scope();
  std::string scope_path() const;  // "tower1/fc2", "" at the top
  Reuse reuse() const;             // effective reuse of the innermost scope

  // The readable text form, one node per line:
  //   %7 = add(%5, %6) : f32[B,512]  @ examples/mlp.cpp:12 in "fc1"
  std::string str() const;
  std::string node_str(int id) const;

  // The graph DSL calls build into: the innermost GraphScope's, else a per-thread default.
  static Graph& current();

 private:
  std::vector<Node> nodes_;
  std::vector<VariableInfo> variables_;
  std::map<std::string, int> variable_index_;
  std::map<std::string, int> inputs_;
  struct ScopeFrame {
    std::string name;
    Reuse reuse;
  };
  std::vector<ScopeFrame> scopes_;
  int differentiating_ = -1;
};

// Makes `graph` the current graph for the lifetime of this object (nests).
class GraphScope {
 public:
  explicit GraphScope(Graph& graph);
  ~GraphScope();
  GraphScope(const GraphScope&) = delete;
  GraphScope& operator=(const GraphScope&) = delete;

 private:
  Graph* previous_;
};

// Enters a variable scope of the current graph: names of variables and nodes built inside are
// prefixed with it, and `reuse` says whether existing variables may be returned.
class VariableScope {
 public:
  explicit VariableScope(const std::string& name, Reuse reuse = Reuse::inherit);
  ~VariableScope();
  VariableScope(const VariableScope&) = delete;
  VariableScope& operator=(const VariableScope&) = delete;

 private:
  Graph* graph_;
};

}  // namespace towerjit
