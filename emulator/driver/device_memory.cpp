#include "emulator/driver/device_memory.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace towerjit::emulator {
namespace {

constexpr unsigned char kGuardByte = 0xa5;

bool inside(const std::map<std::uintptr_t, std::size_t>& blocks, std::uintptr_t address, std::size_t bytes) {
  auto it = blocks.upper_bound(address);
  if (it == blocks.begin()) return false;
  --it;
  return address + bytes <= it->first + it->second;
}

}  // namespace

DeviceMemory::~DeviceMemory() {
  for (auto& [address, a] : allocations_) std::free(a.block);
}

std::optional<std::uintptr_t> DeviceMemory::allocate(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  const std::size_t rounded = (bytes + kAllocationAlignment - 1) / kAllocationAlignment * kAllocationAlignment;
  if (used_ + rounded > limit_) return std::nullopt;
  const std::size_t total = kGuardBytes + rounded + kGuardBytes;
  char* block = static_cast<char*>(std::aligned_alloc(kAllocationAlignment, total));
  if (!block) return std::nullopt;
  std::memset(block, kGuardByte, kGuardBytes);
  std::memset(block + kGuardBytes, 0xff, rounded);  // poison: NaN
  std::memset(block + kGuardBytes + bytes, kGuardByte, total - kGuardBytes - bytes);  // the tail guards too
  const auto address = reinterpret_cast<std::uintptr_t>(block + kGuardBytes);
  allocations_[address] = {block, bytes};
  used_ += rounded;
  return address;
}

bool DeviceMemory::free(std::uintptr_t address) {
  std::lock_guard lock(mutex_);
  auto it = allocations_.find(address);
  if (it == allocations_.end()) return false;
  used_ -= (it->second.bytes + kAllocationAlignment - 1) / kAllocationAlignment * kAllocationAlignment;
  std::free(it->second.block);
  allocations_.erase(it);
  return true;
}

bool DeviceMemory::contains(std::uintptr_t address, std::size_t bytes) const {
  std::lock_guard lock(mutex_);
  auto it = allocations_.upper_bound(address);
  if (it == allocations_.begin()) return false;
  --it;
  return address + bytes <= it->first + it->second.bytes;
}

std::string DeviceMemory::damaged_guards() const {
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  for (const auto& [address, a] : allocations_) {
    const char* user = a.block + kGuardBytes;
    const std::size_t tail = (a.bytes + kAllocationAlignment - 1) / kAllocationAlignment * kAllocationAlignment - a.bytes + kGuardBytes;
    for (std::size_t i = 0; i < kGuardBytes; ++i)
      if (static_cast<unsigned char>(a.block[i]) != kGuardByte) {
        out << "a write " << kGuardBytes - i << " bytes before the allocation of " << a.bytes << " bytes at 0x"
            << std::hex << address << std::dec << " (address 0x" << std::hex << address - (kGuardBytes - i)
            << std::dec << "); ";
        break;
      }
    for (std::size_t i = 0; i < tail; ++i)
      if (static_cast<unsigned char>(user[a.bytes + i]) != kGuardByte) {
        out << "a write " << i << " bytes past the end of the allocation of " << a.bytes << " bytes at 0x"
            << std::hex << address << " (address 0x" << address + a.bytes + i << std::dec << "); ";
        break;
      }
  }
  return out.str();
}

std::size_t DeviceMemory::used() const {
  std::lock_guard lock(mutex_);
  return used_;
}

void* PinnedHostMemory::allocate(std::size_t bytes) {
  void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!p) return nullptr;
  std::lock_guard lock(mutex_);
  blocks_[reinterpret_cast<std::uintptr_t>(p)] = bytes;
  return p;
}

bool PinnedHostMemory::free(void* p) {
  std::lock_guard lock(mutex_);
  if (!blocks_.erase(reinterpret_cast<std::uintptr_t>(p))) return false;
  std::free(p);
  return true;
}

bool PinnedHostMemory::contains(std::uintptr_t address, std::size_t bytes) const {
  std::lock_guard lock(mutex_);
  return inside(blocks_, address, bytes);
}

}  // namespace towerjit::emulator
