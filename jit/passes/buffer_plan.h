// Buffer planning by liveness: temporaries whose lifetimes do not overlap share memory, so a
// training step's activations and gradients fit in one reused arena.
#pragma once

#include <cstdint>
#include <vector>

#include "jit/kir/kernel_ir.h"

namespace towerjit {

struct BufferPlan {
  std::vector<int64_t> offset;  // bytes into the arena for temporaries, -1 for the others
  int64_t arena_bytes = 0;      // the peak: what one run needs for temporaries
};

// Lays out the program's temporaries for a batch size. A buffer lives from the step that
// writes it to the last step that reads it (fetched ones to the end); a step never writes
// over memory it reads, so no kernel has to be safe in place.
BufferPlan plan_buffers(const kir::Program& program, int64_t batch);

}  // namespace towerjit
