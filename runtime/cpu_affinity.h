// Which cores a thread may run on: the cores this process is allowed (taskset, cgroups), and
// pinning a thread to some of them. CPU towers are pinned so that each keeps its caches and,
// on a machine with several sockets, its memory node; their cores are shared out by
// tower_cores().
#pragma once

#include <vector>

namespace towerjit {

// The cores this process may run on, in increasing order (at least one).
std::vector<int> allowed_cores();

// Restricts the calling thread to `cores` (an empty list changes nothing). Returns false when
// the system refuses (the thread then runs where it did).
bool pin_current_thread(const std::vector<int>& cores);

// The calling thread's cores now.
std::vector<int> current_thread_cores();

// The cores of each of `towers` CPU towers out of `cores`: contiguous, disjoint groups whose
// sizes differ by at most one (3 towers on 4 cores: {0}, {1}, {2, 3}); with more towers than
// cores, tower t gets core t mod cores.size(), so towers share cores evenly.
std::vector<std::vector<int>> tower_cores(int towers, const std::vector<int>& cores);

// Pins the calling thread for its lifetime in scope and gives back its previous cores after:
// tower 0 runs on the caller's thread, which belongs to the user.
class ScopedPin {
 public:
  explicit ScopedPin(const std::vector<int>& cores);
  ~ScopedPin();
  ScopedPin(const ScopedPin&) = delete;
  ScopedPin& operator=(const ScopedPin&) = delete;

 private:
  std::vector<int> previous_;
};

}  // namespace towerjit
