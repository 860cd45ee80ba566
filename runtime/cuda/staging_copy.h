// Copies into page-locked staging on several threads. A step's feeds go from the caller's
// pageable memory into the program's page-locked block before the device copies them
// (cuda_program.cpp): on the H200 the MLP's 12.8 MB batch made most of a 3.2 ms step with one
// thread copying (docs/cuda.md, Figures). Large copies are cut into pieces that a small
// process-wide pool copies at once; small ones, and any while the pool is busy with another
// program's, are one memcpy on the calling thread.
#pragma once

#include <cstddef>

namespace towerjit {
class ThreadPool;
}  // namespace towerjit

namespace towerjit::cuda {

void copy_to_staging(void* dst, const void* src, size_t bytes);

// The copy in 1 MiB pieces split between `pool`'s threads (what copy_to_staging does with its
// pool for large copies; here for the tests).
void copy_in_pieces(ThreadPool& pool, void* dst, const void* src, size_t bytes);

}  // namespace towerjit::cuda
