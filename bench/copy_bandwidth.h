// The machine's copy bandwidth, the memory roofline of the loop kernels: the bench reports
// each kernel's bytes moved and GB/s against it, as it reports convolutions against the sgemm
// peak (bench/gemm_floor.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/thread_pool.h"

namespace towerjit::bench {

// GB/s of memcpy between two buffers of `bytes` each, counting the bytes read and the bytes
// written, as the kernels' figures count them: on one thread, and split in halves over the
// pool's threads. Best of 5 timed copies each, after a warm-up copy that also faults the pages
// in. The bench's roofline is the 64 MiB copy (far past the caches: memory bandwidth); it also
// times an 8 MiB copy, the size of one activation of its ResNet, which the last-level cache
// may hold, since a kernel that reads what the step before it wrote can beat memory.
struct CopyBandwidth {
  double one_thread = 0, pool = 0;
  int64_t buffer_bytes = 0;
};
CopyBandwidth copy_bandwidth(ThreadPool& pool, int64_t bytes = int64_t{64} << 20);
// Each rate's larger value, of copies of the same size.
inline CopyBandwidth best_of(const CopyBandwidth& a, const CopyBandwidth& b) {
  return {std::max(a.one_thread, b.one_thread), std::max(a.pool, b.pool), b.buffer_bytes};
}

}  // namespace towerjit::bench
