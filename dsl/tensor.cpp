#include "dsl/tensor.h"

#include "dsl/error.h"
#include "dsl/ops.h"

namespace towerjit {

std::string Tensor::describe() const {
  if (!valid()) return "<empty tensor>";
  return std::string(dtype_name(dtype())) + shape().str() + " (" + std::string(op_name(node().op)) +
         ")";
}

// Operators report the location of their left operand: where the expression was written.
Tensor operator+(Operand a, Operand b) { return add(a, b, a.loc); }
Tensor operator-(Operand a, Operand b) { return sub(a, b, a.loc); }
Tensor operator*(Operand a, Operand b) { return mul(a, b, a.loc); }
Tensor operator/(Operand a, Operand b) { return div(a, b, a.loc); }
Tensor operator-(Operand a) {
  if (a.is_scalar) return constant(-a.scalar, {}, DType::f32, a.loc);
  return neg(a.tensor, a.loc);
}
Tensor operator<(Operand a, Operand b) { return less(a, b, a.loc); }
Tensor operator<=(Operand a, Operand b) { return less_equal(a, b, a.loc); }
Tensor operator>(Operand a, Operand b) { return greater(a, b, a.loc); }
Tensor operator>=(Operand a, Operand b) { return greater_equal(a, b, a.loc); }
Tensor operator==(Operand a, Operand b) { return equal(a, b, a.loc); }
Tensor operator!=(Operand a, Operand b) { return not_equal(a, b, a.loc); }

std::vector<int> node_ids(const Graph& graph, const std::vector<Tensor>& tensors) {
  std::vector<int> ids;
  for (const Tensor& t : tensors) {
    internal_check(t.valid() && &t.graph() == &graph) << "a tensor of another graph";
    ids.push_back(t.id());
  }
  return ids;
}

}  // namespace towerjit
