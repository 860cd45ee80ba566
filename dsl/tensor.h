// Tensor: a handle to a node of a graph. Operators build nodes; nothing is computed until a
// backend (or the reference interpreter) runs the graph.
#pragma once

#include <source_location>
#include <vector>

#include "dsl/graph.h"

namespace towerjit {

using Loc = std::source_location;

class Tensor {
 public:
  Tensor() = default;
  Tensor(Graph* graph, int id) : graph_(graph), id_(id) {}

  bool valid() const { return graph_ != nullptr; }
  Graph& graph() const { return *graph_; }
  int id() const { return id_; }
  const Node& node() const { return graph_->node(id_); }
  const Shape& shape() const { return node().shape; }
  DType dtype() const { return node().dtype; }
  int rank() const { return shape().rank(); }
  // "f32[B,512] (matmul)": what error messages print.
  std::string describe() const;

 private:
  Graph* graph_ = nullptr;
  int id_ = -1;
};

// One side of an operator: a tensor or a plain number, with the user's source location.
// Operators take Operands because an operator cannot have a defaulted location parameter;
// the location is captured where the user's operand is converted.
struct Operand {
  Operand(Tensor t, Loc loc = Loc::current()) : tensor(t), loc(loc) {}
  Operand(double v, Loc loc = Loc::current()) : scalar(v), is_scalar(true), loc(loc) {}
  Tensor tensor;
  double scalar = 0;
  bool is_scalar = false;
  Loc loc;
};

Tensor operator+(Operand a, Operand b);
Tensor operator-(Operand a, Operand b);
Tensor operator*(Operand a, Operand b);
Tensor operator/(Operand a, Operand b);
Tensor operator-(Operand a);
Tensor operator<(Operand a, Operand b);
Tensor operator<=(Operand a, Operand b);
Tensor operator>(Operand a, Operand b);
Tensor operator>=(Operand a, Operand b);
Tensor operator==(Operand a, Operand b);
Tensor operator!=(Operand a, Operand b);

// The node ids of `tensors`, all of which must belong to `graph` (an internal error otherwise):
// what the lowering takes as fetches and update ops.
std::vector<int> node_ids(const Graph& graph, const std::vector<Tensor>& tensors);
inline Tensor& operator+=(Tensor& a, Operand b) { return a = Operand(a, b.loc) + b; }
inline Tensor& operator-=(Tensor& a, Operand b) { return a = Operand(a, b.loc) - b; }
inline Tensor& operator*=(Tensor& a, Operand b) { return a = Operand(a, b.loc) * b; }
inline Tensor& operator/=(Tensor& a, Operand b) { return a = Operand(a, b.loc) / b; }

}  // namespace towerjit
