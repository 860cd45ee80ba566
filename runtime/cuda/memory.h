// GPU memory: a caching device allocator (one per device) and page-locked host staging.
//
// cuMemAlloc and cuMemFree are slow (they may synchronise the device), and a training step
// asks for the same sizes step after step, so freed blocks go to per-size-class free lists
// and are handed out again: sizes up to 1 MiB round up to a power of two (at least 512
// bytes), larger ones to a multiple of 2 MiB. When the driver runs out of memory, the cached
// blocks are returned to it and the allocation is tried once more.
//
// The cache is not stream-ordered: a buffer must be released only when no queued work still
// uses it (CudaProgram releases nothing while its stream runs; it synchronises at the end of
// every run).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <source_location>
#include <vector>

#include "runtime/cuda/driver_api.h"

namespace towerjit::cuda {

class DeviceAllocator;

// A block of device memory, returned to its allocator's cache when destroyed. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }        // what was asked for
  size_t capacity() const { return capacity_; }  // its size class
  explicit operator bool() const { return ptr_ != 0; }
  // Gives the block back to the cache now.
  void reset();
  // A view of `bytes` at `ptr` that owns nothing (its destruction frees nothing): a buffer
  // that stays valid only as long as its owner keeps it, such as a program's fetch read in
  // place from the program's arena (CudaProgram::set_fetches_in_place).
  static DeviceBuffer view(CUdeviceptr ptr, size_t bytes) {
    DeviceBuffer b;
    b.ptr_ = ptr, b.bytes_ = b.capacity_ = bytes;
    return b;
  }

 private:
  friend class DeviceAllocator;
  DeviceAllocator* owner_ = nullptr;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0, capacity_ = 0;
};

class DeviceAllocator {
 public:
  DeviceAllocator(int ordinal, CUcontext context) : ordinal_(ordinal), context_(context) {}
  ~DeviceAllocator();  // returns the cached blocks to the driver (errors ignored)
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // A block of at least `bytes` (256-byte aligned); an empty buffer for 0 bytes. Throws
  // towerjit::Error naming `loc`, the sizes and the device's free memory when it cannot.
  DeviceBuffer allocate(size_t bytes, std::source_location loc = std::source_location::current());
  // Returns every cached (free) block to the driver.
  void release_cached();

  struct Stats {
    size_t in_use = 0;        // bytes of size classes handed out
    size_t cached = 0;        // bytes waiting in the free lists
    size_t peak_in_use = 0;
    int64_t driver_allocations = 0;  // cuMemAlloc calls
    int64_t cache_hits = 0;
  };
  Stats stats() const;

  // The size class `bytes` rounds up to.
  static size_t size_class(size_t bytes);

 private:
  friend class DeviceBuffer;
  void give_back(CUdeviceptr ptr, size_t capacity);
  void release_cached_locked();

  int ordinal_;
  CUcontext context_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<CUdeviceptr>> free_;  // size class -> blocks
  Stats stats_;
};

// Page-locked host memory for staging copies between pageable host memory and the device
// (the driver copies asynchronously only from page-locked memory). Grows on demand.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(CUcontext context) : context_(context) {}
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // At least `bytes` of page-locked memory; the old contents are not kept when it grows, so
  // grow only while no copy from or to it is queued.
  char* reserve(size_t bytes, std::source_location loc = std::source_location::current());
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  CUcontext context_;
  char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace towerjit::cuda
