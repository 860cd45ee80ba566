#include "runtime/towers/weighted_sum.h"

#include "dsl/ops.h"

namespace towerjit {

std::string part(int set, size_t k) { return "s" + std::to_string(set) + "/" + std::to_string(k); }
std::string gradient_weight(int set) { return "w" + std::to_string(set); }
std::string update_weight(int set) { return "m" + std::to_string(set); }

std::unique_ptr<CudaProgram> weighted_sum(int sets, const std::vector<Shape>& shapes, const std::vector<bool>& is_update,
                                          const Device& device, const std::string& name, Loc loc) {
  Graph g;
  GraphScope use(g);
  std::vector<Tensor> w, m, sums;
  for (int i = 0; i < sets; ++i) {
    w.push_back(input(gradient_weight(i), Shape{}));
    m.push_back(input(update_weight(i), Shape{}));
  }
  for (size_t k = 0; k < shapes.size(); ++k) {
    Tensor sum;
    for (int i = 0; i < sets; ++i) {
      const Tensor term = input(part(i, k), shapes[k]) * (is_update[k] ? m[i] : w[i]);
      sum = i == 0 ? term : sum + term;
    }
    sums.push_back(sum);
  }
  return std::make_unique<CudaProgram>(g, sums, /*run_update_ops=*/false, device, name, loc);
}

}  // namespace towerjit
