#include "runtime/towers/weighted_sum.h"

#include "dsl/ops.h"

namespace towerjit {

namespace {
// `letter` then the numbers, built by appending (GCC 12 warns falsely on "x" + std::to_string).
std::string name_of(char letter, int set, const size_t* k = nullptr) {
  std::string name(1, letter);
  name += std::to_string(set);
  if (k) name += '/', name += std::to_string(*k);
  return name;
}
}  // namespace

std::string part(int set, size_t k) { return name_of('s', set, &k); }
std::string gradient_weight(int set) { return name_of('w', set); }
std::string update_weight(int set) { return name_of('m', set); }

std::unique_ptr<CudaProgram> weighted_sum(int sets, const std::vector<Shape>& shapes, const std::vector<bool>& is_update,
                                          const Device& device, const std::string& name, Loc loc,
                                          DType gradients_in, DType gradients_out) {
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
      const Tensor term = is_update[k] ? input(part(i, k), shapes[k]) * m[i]
                                       : cast(input(part(i, k), shapes[k], gradients_in), DType::f32) * w[i];
      sum = i == 0 ? term : sum + term;
    }
    sums.push_back(is_update[k] ? sum : cast(sum, gradients_out));
  }
  return std::make_unique<CudaProgram>(g, sums, /*run_update_ops=*/false, device, name, loc);
}

std::unique_ptr<CudaProgram> widened(const std::vector<Shape>& shapes, DType from, const Device& device,
                                     const std::string& name, Loc loc) {
  Graph g;
  GraphScope use(g);
  std::vector<Tensor> wide;
  for (size_t k = 0; k < shapes.size(); ++k) wide.push_back(cast(input(part(0, k), shapes[k], from), DType::f32));
  return std::make_unique<CudaProgram>(g, wide, /*run_update_ops=*/false, device, name, loc);
}

}  // namespace towerjit
