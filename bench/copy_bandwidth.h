// The machine's copy bandwidth, the memory roofline of the loop kernels: the bench reports
// each kernel's bytes moved and GB/s against it, as it reports convolutions against the sgemm
// peak (bench/gemm_floor.h).
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"

namespace towerjit::bench {

// GB/s of memcpy between two 64 MiB buffers (far past the caches), counting the bytes read
// and the bytes written, as the kernels' figures count them: on one thread, and split in
// halves over the pool's threads. Best of 5 timed copies each, after a warm-up copy that also
// faults the pages in.
struct CopyBandwidth {
  double one_thread = 0, pool = 0;
  int64_t buffer_bytes = 0;
};
CopyBandwidth copy_bandwidth(ThreadPool& pool);

}  // namespace towerjit::bench
