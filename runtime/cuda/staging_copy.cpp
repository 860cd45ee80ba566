#include "runtime/cuda/staging_copy.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "runtime/thread_pool.h"

namespace towerjit::cuda {

namespace {
// Below this a single memcpy is as quick as waking the pool.
constexpr size_t kParallelBytes = size_t{2} << 20;
constexpr size_t kPieceBytes = size_t{1} << 20;

// Half the hardware threads, at most 8: a host's memory bandwidth is shared by all copiers,
// and the rest of the machine (other towers, the input pipeline) keeps working meanwhile.
int copier_count() {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp(hw / 2, 1, 8);
}

std::mutex pool_mutex;
ThreadPool& pool() {
  static ThreadPool p(copier_count());
  return p;
}
}  // namespace

void copy_to_staging(void* dst, const void* src, size_t bytes) {
  if (bytes < kParallelBytes || copier_count() == 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::unique_lock lock(pool_mutex, std::try_to_lock);
  if (!lock.owns_lock()) {  // another program's copy holds the pool: do not wait for it
    std::memcpy(dst, src, bytes);
    return;
  }
  copy_in_pieces(pool(), dst, src, bytes);
}

void copy_in_pieces(ThreadPool& pool, void* dst, const void* src, size_t bytes) {
  const auto pieces = static_cast<int64_t>((bytes + kPieceBytes - 1) / kPieceBytes);
  pool.parallel_for(pieces, [&](int64_t begin, int64_t end) {
    const size_t from = static_cast<size_t>(begin) * kPieceBytes;
    const size_t to = std::min(bytes, static_cast<size_t>(end) * kPieceBytes);
    std::memcpy(static_cast<char*>(dst) + from, static_cast<const char*>(src) + from, to - from);
  });
}

}  // namespace towerjit::cuda
