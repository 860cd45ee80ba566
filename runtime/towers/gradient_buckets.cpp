#include "runtime/towers/gradient_buckets.h"

#include <algorithm>
#include <numeric>

namespace towerjit {

std::vector<std::vector<int>> plan_buckets(const std::vector<int>& ready, const std::vector<int64_t>& bytes,
                                           int64_t cap_bytes, int64_t first_cap_bytes) {
  std::vector<int> order(ready.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ready[a] < ready[b]; });
  std::vector<std::vector<int>> buckets;
  int64_t held = 0;
  bool open = false;
  for (int i : order) {
    if (!open) buckets.emplace_back(), held = 0, open = true;
    buckets.back().push_back(i);
    held += bytes[i];
    const int64_t cap = buckets.size() == 1 ? first_cap_bytes : cap_bytes;
    if (held >= cap) open = false;
  }
  return buckets;
}

}  // namespace towerjit
