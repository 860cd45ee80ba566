#include "runtime/cpu_affinity.h"

#include <pthread.h>
#include <sched.h>

#include <cstdint>

namespace towerjit {
namespace {

std::vector<int> cores_of(const cpu_set_t& set) {
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

}  // namespace

std::vector<int> allowed_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cores;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cores = cores_of(set);
  if (cores.empty()) cores.push_back(0);
  return cores;
}

std::vector<int> current_thread_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0) return {};
  return cores_of(set);
}

bool pin_current_thread(const std::vector<int>& cores) {
  if (cores.empty()) return true;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

std::vector<std::vector<int>> tower_cores(int towers, const std::vector<int>& cores) {
  std::vector<std::vector<int>> out(towers > 0 ? towers : 0);
  if (cores.empty()) return out;
  const int n = static_cast<int>(cores.size());
  if (towers >= n) {
    for (int t = 0; t < towers; ++t) out[t] = {cores[t % n]};
    return out;
  }
  for (int t = 0; t < towers; ++t)
    out[t].assign(cores.begin() + static_cast<int64_t>(n) * t / towers, cores.begin() + static_cast<int64_t>(n) * (t + 1) / towers);
  return out;
}

ScopedPin::ScopedPin(const std::vector<int>& cores) {
  if (cores.empty()) return;
  previous_ = current_thread_cores();
  if (!pin_current_thread(cores)) previous_.clear();
}

ScopedPin::~ScopedPin() { pin_current_thread(previous_); }

}  // namespace towerjit
