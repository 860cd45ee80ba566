// Which gradients are reduced together: PyTorch DDP's buckets. The gradients are taken in the
// order the backward pass finishes them; a bucket closes once it holds at least its cap in
// bytes (the first bucket's cap is smaller, so the reduction starts early), and the last holds
// what is left. Each bucket is reduced as soon as its last gradient is ready, while the rest of
// the backward pass runs.
#pragma once

#include <cstdint>
#include <vector>

namespace towerjit {

// `ready[i]`: when tensor i is finished (e.g. the step index; ties keep index order); `bytes[i]`
// its size. Returns the buckets, each a list of tensor indices in ready order; every tensor
// is in exactly one. Caps of 0 or less put every tensor in a bucket of its own.
std::vector<std::vector<int>> plan_buckets(const std::vector<int>& ready, const std::vector<int64_t>& bytes,
                                           int64_t cap_bytes, int64_t first_cap_bytes);

}  // namespace towerjit
