// An emulated GPU's memory: device allocations are host allocations with the driver's 256-byte
// alignment, a limit (so out-of-memory is real), contents poisoned (every byte 0xff: NaN as a
// float) when allocated so a read of never-written memory shows, and guard zones on both sides
// checked after every launch. Page-locked host memory is tracked too: a kernel may be given a
// pointer into it, and into nothing else of the host's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace towerjit::emulator {

inline constexpr std::size_t kAllocationAlignment = 256;
inline constexpr std::size_t kGuardBytes = 256;

class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t limit) : limit_(limit) {}
  ~DeviceMemory();

  // A new allocation's address, or nullopt past the limit.
  std::optional<std::uintptr_t> allocate(std::size_t bytes);
  // False when `address` is not an allocation's start.
  bool free(std::uintptr_t address);

  // Whether [address, address + bytes) lies inside one allocation.
  bool contains(std::uintptr_t address, std::size_t bytes) const;
  // Every allocation whose guard zones were written, said in words; empty when none.
  std::string damaged_guards() const;

  std::size_t used() const;
  std::size_t limit() const { return limit_; }

 private:
  struct Allocation {
    char* block;  // what was allocated: guard, the user's bytes, guard
    std::size_t bytes;
  };
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Allocation> allocations_;  // by the user's address
  std::size_t limit_, used_ = 0;
};

// Page-locked host memory (cuMemAllocHost), the only host memory a kernel may read.
class PinnedHostMemory {
 public:
  void* allocate(std::size_t bytes);
  bool free(void* p);
  bool contains(std::uintptr_t address, std::size_t bytes) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> blocks_;
};

}  // namespace towerjit::emulator
