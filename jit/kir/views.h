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

}  // namespace towerjit::kir
