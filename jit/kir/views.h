// Views in the kernel IR: a reshape's buffer is a view of another's elements (Buffer::alias_of),
// so what touches one touches the other. Passes that move work between steps ask these.
#pragma once

#include "jit/kir/kernel_ir.h"

namespace towerjit::kir {

// The buffer whose elements `b` are: a view's source, followed to the end (b itself if none).
int root_of(const Program& p, int b);

// Whether `step` reads or writes buffer `b` or a view sharing its elements; with `writes_only`,
// whether it writes them.
bool touches(const Program& p, const Step& step, int b, bool writes_only);

// Whether a step after `from`, up to `to`, touches the memory of buffer `b` (views included):
// with `writes_only`, writes it.
bool touched_between(const Program& p, int b, int from, int to, bool writes_only);

// The steps that write and read each buffer (the buffer itself, not its views), each step once
// and in order.
struct Uses {
  std::vector<std::vector<int>> writers, readers;
};
Uses uses_of(const Program& p);

}  // namespace towerjit::kir
