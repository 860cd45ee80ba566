// The bytes a loop kernel moves, as the dump's index and the bench's loop-kernel rates count
// them: every buffer it stores counted whole, once; every buffer it loads counted whole, once,
// unless its loads touch fewer of it. A load reads at most one element a point of its body's
// loop space, and from memory at most one 32-byte sector (the GPU's unit of DRAM access), so a
// buffer's charge is the smaller of its size and 32 bytes a point of each load from it: batch
// norm's per-channel statistics reading the channel's first element of x, 16 points, read 512
// bytes of it, not x. A broadcast operand (gamma, loaded at every point) counts its own size.
#pragma once

#include <set>

#include "jit/kir/kernel_ir.h"

namespace towerjit::kir {

inline constexpr int64_t kSectorBytes = 32;

// Bytes loaded and stored by `kernel` (a group: each part's, each buffer once), as c + b*B.
Affine bytes_read(const Program& p, const Kernel& kernel);
Affine bytes_written(const Program& p, const Kernel& kernel);
// Both: what the bench's loop-kernel rates and the cost model's launches are charged.
Affine bytes_moved(const Program& p, const Kernel& kernel);

// The buffers `kernel` loads (a group: each part's).
std::set<int> loaded_buffers(const Kernel& kernel);

// The bytes of buffer `id`, whole.
Affine buffer_bytes(const Program& p, int id);

}  // namespace towerjit::kir
