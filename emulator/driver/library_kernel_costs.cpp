#include "emulator/driver/library_kernel_costs.h"

#include "jit/cuda/device/library_params.h"

namespace towerjit::emulator {
namespace {

template <typename T>
const T& param(void** params, int i) {
  return *static_cast<const T*>(params[i]);
}

double box_elements(const long long* dims, int rank) {
  double n = 1;
  for (int d = 0; d < rank; ++d) n *= static_cast<double>(dims[d]);
  return n;
}

}  // namespace

KernelCost library_kernel_cost(const std::string& k, void** params) {
  constexpr double f = 4;  // every library kernel's elements are 4 bytes
  if (k == "tj_im2col" || k == "tj_col2im") {
    const auto& g = param<TjConvShape>(params, 2);
    const double image = static_cast<double>(g.n) * g.c * g.h * g.w;
    const double cols = static_cast<double>(g.n) * g.c * g.kh * g.kw * g.oh * g.ow;
    return {f * (image + cols), 0};
  }
  if (k == "tj_max_pool2d" || k == "tj_avg_pool2d") {
    const auto& s = param<TjPoolShape>(params, 2);
    return {f * static_cast<double>(s.planes) * (s.h * s.w + s.oh * s.ow), 0};
  }
  if (k == "tj_max_pool2d_grad") {  // reads x and dy, writes dx
    const auto& s = param<TjPoolShape>(params, 3);
    return {f * static_cast<double>(s.planes) * (2 * s.h * s.w + s.oh * s.ow), 0};
  }
  if (k == "tj_avg_pool2d_grad") {
    const auto& s = param<TjPoolShape>(params, 2);
    return {f * static_cast<double>(s.planes) * (s.h * s.w + s.oh * s.ow), 0};
  }
  if (k == "tj_one_hot") {
    const double count = static_cast<double>(param<long long>(params, 2)), depth = static_cast<double>(param<long long>(params, 3));
    return {f * (count + count * depth), 0};
  }
  if (k == "tj_argmax") {
    const double outer = static_cast<double>(param<long long>(params, 2)), n = static_cast<double>(param<long long>(params, 3)),
                 inner = static_cast<double>(param<long long>(params, 4));
    return {f * (outer * n * inner + outer * inner), 0};
  }
  if (k == "tj_gather") {  // reads an index and an element, writes one, per output
    const double n = static_cast<double>(param<long long>(params, 3)) * param<long long>(params, 5) *
                     param<long long>(params, 6);
    return {f * 3 * n, 0};
  }
  if (k == "tj_gather_grad") {  // per (column, index): reads the index and dy, adds into the table
    const double n = static_cast<double>(param<long long>(params, 3)) * param<long long>(params, 5) *
                     param<long long>(params, 6);
    return {f * 4 * n, n};
  }
  if (k == "tj_pad") {
    const auto& b = param<TjBox>(params, 2);
    return {f * (box_elements(b.src, b.rank) + box_elements(b.dst, b.rank)), 0};
  }
  if (k == "tj_copy_box") {
    const auto& b = param<TjBox>(params, 2);
    return {f * 2 * box_elements(b.src, b.rank), 0};
  }
  if (k == "tj_sum_images") {  // reads every image's part, writes one sum per weight; an add per part
    const double images = static_cast<double>(param<long long>(params, 2)), count = static_cast<double>(param<long long>(params, 3));
    return {f * (images * count + count), images * count};
  }
  return {};
}

}  // namespace towerjit::emulator
