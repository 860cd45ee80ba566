#include "bench/copy_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace towerjit::bench {

CopyBandwidth copy_bandwidth(ThreadPool& pool, int64_t bytes) {
  const int64_t kBytes = bytes / 4096 * 4096;
  std::vector<char> src(kBytes, 1), dst(kBytes, 0);
  auto best_gbps = [&](bool split) {
    double best_s = 1e30;
    for (int r = 0; r < 6; ++r) {  // the first is a warm-up
      const auto t0 = std::chrono::steady_clock::now();
      if (split) {
        pool.parallel_for(kBytes / 4096, [&](int64_t begin, int64_t end) {
          std::memcpy(dst.data() + begin * 4096, src.data() + begin * 4096, (end - begin) * 4096);
        });
      } else {
        std::memcpy(dst.data(), src.data(), kBytes);
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) best_s = std::min(best_s, s);
    }
    return 2.0 * kBytes / best_s / 1e9;  // read + write
  };
  return {best_gbps(false), best_gbps(true), kBytes};
}

}  // namespace towerjit::bench
