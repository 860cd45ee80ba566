#include "runtime/cuda/memory.h"

#include "jit/knobs.h"

#include <algorithm>
#include <sstream>

#include "dsl/error.h"

namespace towerjit::cuda {
namespace {

constexpr size_t kSmallest = 512;
constexpr size_t kSmallLimit = size_t{1} << 20;  // power-of-two classes up to 1 MiB
constexpr size_t kLargeStep = size_t{2} << 20;   // then multiples of 2 MiB
constexpr CuResult kOutOfMemory = 2;             // CUDA_ERROR_OUT_OF_MEMORY

std::string mib(size_t bytes) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return out.str();
}

}  // namespace

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = other.owner_, ptr_ = other.ptr_, bytes_ = other.bytes_, capacity_ = other.capacity_;
    other.owner_ = nullptr, other.ptr_ = 0, other.bytes_ = other.capacity_ = 0;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (owner_ && ptr_) owner_->give_back(ptr_, capacity_);
  owner_ = nullptr, ptr_ = 0, bytes_ = capacity_ = 0;
}

size_t DeviceAllocator::size_class(size_t bytes) {
  if (bytes == 0) return 0;
  if (bytes > kSmallLimit) return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
  size_t c = kSmallest;
  while (c < bytes) c <<= 1;
  return c;
}

DeviceAllocator::~DeviceAllocator() {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  } catch (...) {  // at process exit the driver may already be gone
  }
}

DeviceBuffer DeviceAllocator::allocate(size_t bytes, std::source_location loc) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  const size_t cls = knobs::cuda_caching() ? size_class(bytes) : bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    b.ptr_ = it->second.back();
    it->second.pop_back();
    stats_.cached -= cls;
    ++stats_.cache_hits;
  } else {
    const DriverApi& api = require_driver(loc);
    check_cuda(api.CtxSetCurrent(context_), "cuCtxSetCurrent");
    CuResult r = api.MemAlloc(&b.ptr_, cls);
    if (r == kOutOfMemory && stats_.cached > 0) {  // give the cache back and try once more
      release_cached_locked();
      r = api.MemAlloc(&b.ptr_, cls);
    }
    if (r != kCudaSuccess) {
      size_t free_bytes = 0, total = 0;
      api.MemGetInfo(&free_bytes, &total);
      check_cuda(r, "cuMemAlloc",
                 " allocating " + mib(cls) + " on gpu:" + std::to_string(ordinal_) + " (towerjit holds " +
                     mib(stats_.in_use) + ", the device has " + mib(free_bytes) + " free of " + mib(total) +
                     "); use a smaller batch or fewer towers on this GPU",
                 loc);
    }
    ++stats_.driver_allocations;
  }
  b.owner_ = this;
  b.bytes_ = bytes;
  b.capacity_ = cls;
  stats_.in_use += cls;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  return b;
}

void DeviceAllocator::give_back(CUdeviceptr ptr, size_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!knobs::cuda_caching()) {  // TOWERJIT_CUDA_CACHING=off: straight back to the driver
    const DriverApi& api = require_driver();
    api.CtxSetCurrent(context_);
    api.MemFree(ptr);
    stats_.in_use -= capacity;
    return;
  }
  free_[capacity].push_back(ptr);
  stats_.in_use -= capacity;
  stats_.cached += capacity;
}

void DeviceAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void DeviceAllocator::release_cached_locked() {
  if (stats_.cached == 0) return;
  const DriverApi& api = require_driver();
  api.CtxSetCurrent(context_);
  for (auto& [cls, blocks] : free_) {
    for (CUdeviceptr p : blocks) api.MemFree(p);  // a failure here leaves nothing to undo
    blocks.clear();
  }
  stats_.cached = 0;
}

DeviceAllocator::Stats DeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

PinnedBuffer::~PinnedBuffer() {
  if (!data_) return;
  try {
    const DriverApi& api = require_driver();
    api.CtxSetCurrent(context_);
    api.MemFreeHost(data_);
  } catch (...) {
  }
}

char* PinnedBuffer::reserve(size_t bytes, std::source_location loc) {
  if (bytes <= size_ && data_) return data_;
  const DriverApi& api = require_driver(loc);
  check_cuda(api.CtxSetCurrent(context_), "cuCtxSetCurrent");
  if (data_) api.MemFreeHost(data_);
  data_ = nullptr, size_ = 0;
  const size_t want = std::max(bytes + bytes / 2, size_t{1} << 16);  // grow by half again
  void* p = nullptr;
  check_cuda(api.MemAllocHost(&p, want), "cuMemAllocHost",
             " allocating " + mib(want) + " of page-locked host memory for staging", loc);
  data_ = static_cast<char*>(p), size_ = want;
  return data_;
}

}  // namespace towerjit::cuda
