// Copies between a variable that async towers share and a buffer of one tower, as relaxed
// atomic words. The seed's async towers read the variables unlocked while another tower's
// apply writes them (Hogwild): a tower's gather reads rows of an embedding table while a sparse
// apply writes rows of it in place (scatter_rows), or copies a new value over it. With plain
// copies both sides would be a data race, undefined behaviour; as relaxed atomic words each
// float is read whole, from before or after the write, and nothing is ordered beyond that
// (exactly what the seed's towers may see). On x86 a relaxed word is a plain move: measured
// about 1.3x memcpy's time for 512-byte rows (words are not vectorised).
#pragma once

#include <cstddef>
#include <cstdint>

namespace towerjit::cpujit {

inline void copy_relaxed(void* to, const void* from, size_t bytes) {
  auto copy = [&]<typename Word>(Word*) {
    auto* t = static_cast<Word*>(to);
    const auto* f = static_cast<const Word*>(from);
    for (size_t i = 0; i < bytes / sizeof(Word); ++i)
      __atomic_store_n(t + i, __atomic_load_n(f + i, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
  };
  // Elements are 4 bytes (or 2 for 16-bit variables): 8-byte words where the addresses allow.
  const uintptr_t align = reinterpret_cast<uintptr_t>(to) | reinterpret_cast<uintptr_t>(from) | bytes;
  if (align % 8 == 0) copy(static_cast<uint64_t*>(nullptr));
  else if (align % 4 == 0) copy(static_cast<uint32_t*>(nullptr));
  else copy(static_cast<uint16_t*>(nullptr));
}

}  // namespace towerjit::cpujit
