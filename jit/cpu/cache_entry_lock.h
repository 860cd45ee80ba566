// One process at a time making a cache entry that is measured rather than compiled. A compiled
// entry may be made by any number of processes at once (they store the same bytes; the last
// rename wins). A measured one, such as a convolution's algorithm chosen by timing
// (runtime/cuda/conv_choice.h), is not: two processes timing on one GPU at once would each see
// the other's load, and could store different answers, so that two ranks of one job run
// different algorithms. So the maker of such an entry holds an advisory lock (flock) on
// <entry>.lock, looks the entry up again once it holds it (another process may have stored it
// meanwhile), and only on a second miss measures and stores.
//
// flock is held per open file, so it also excludes threads of one process, each with its own
// CacheEntryLock. A process that dies holding it releases it. Waiting is bounded: past `wait`
// (a process stuck on its device) the caller goes on without the lock, as it would without a
// cache, and held() says so. A directory where the lock file cannot be made (read-only, or a
// file system without flock) gives no lock either. The lock file stays, empty, beside its entry:
// removing it would let a process lock a file another has just unlinked. Checkpoints lock their
// directory with flock too (runtime/checkpoint/directory_lock.h), but refuse a held lock at once
// rather than wait for it.
#pragma once

#include <chrono>
#include <string>

#include "jit/cpu/compile_cache.h"

namespace towerjit::cpujit {

class CacheEntryLock {
 public:
  CacheEntryLock(const CompileCache& cache, const std::string& key, std::chrono::milliseconds wait);
  ~CacheEntryLock();
  CacheEntryLock(const CacheEntryLock&) = delete;
  CacheEntryLock& operator=(const CacheEntryLock&) = delete;

  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace towerjit::cpujit
