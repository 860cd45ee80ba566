// The per-routine benches' timing (small_gemm_bench.cpp, attention_bench.cpp,
// activation_bench.cpp): the best of several runs of a batch of calls, in the calling thread's
// CPU time (time it was not running does not count, so a shared machine moves the figures less)
// or in wall time.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <functional>

namespace bench {

inline double thread_cpu_s() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

inline double wall_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds a call, the best of `repeats` runs of `calls` calls after one call to warm up.
inline double best_seconds(const std::function<void()>& f, int calls, int repeats, double (*clock)() = thread_cpu_s) {
  f();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = clock();
    for (int i = 0; i < calls; ++i) f();
    best = std::min(best, (clock() - t0) / calls);
  }
  return best;
}

}  // namespace bench
