#include "jit/passes/coalesce_axes.h"

#include <algorithm>

namespace towerjit {

kir::Kernel coalesce_axes(kir::Kernel k) {
  if (!k.parts.empty()) return k;
  for (const auto& e : k.exprs)
    if (e.kind == kir::Expr::Kind::loop_index) return k;
  auto reduced = [&](int a) {
    return std::find(k.reduce_axes.begin(), k.reduce_axes.end(), a) != k.reduce_axes.end();
  };
  std::vector<int64_t> dims = k.space.dims();
  for (int a = static_cast<int>(dims.size()) - 2; a >= 0; --a) {
    const int64_t n = dims[a + 1];
    if (dims[a] == kBatch || n == kBatch || reduced(a) != reduced(a + 1)) continue;
    const bool walks = std::all_of(k.accesses.begin(), k.accesses.end(), [&](const kir::Access& x) {
      return x.strides[a] == kir::Affine{x.strides[a + 1].c * n, x.strides[a + 1].b * n};
    });
    if (!walks) continue;
    dims[a] *= n;
    dims.erase(dims.begin() + a + 1);
    for (auto& x : k.accesses) {
      x.strides[a] = x.strides[a + 1];
      x.strides.erase(x.strides.begin() + a + 1);
    }
    // Axis a+1 is gone: it was reduced exactly when a is, so drop it and renumber those after.
    std::erase(k.reduce_axes, a + 1);
    for (int& r : k.reduce_axes)
      if (r > a + 1) --r;
  }
  k.space = Shape(dims);
  return k;
}

}  // namespace towerjit
