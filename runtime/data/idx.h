// The IDX format of MNIST and Fashion-MNIST (gzip-compressed or plain): a magic number giving
// the element type and rank, the dimensions, then the elements, big-endian.
#pragma once

#include <source_location>
#include <string>

#include "runtime/host_tensor.h"

namespace towerjit::data {

// Reads an IDX file of unsigned bytes. Images ([N, rows, cols]) come back as f32 scaled to
// [0, 1] and flattened to [N, rows * cols]; labels ([N]) as i32. Errors (towerjit::Error): a
// missing file (naming `hint`, e.g. the Debian package that has it), a bad magic number, a
// size that does not match the header (a truncated or padded file).
HostTensor read_idx(const std::string& path, const std::string& hint = "",
                    std::source_location loc = std::source_location::current());

}  // namespace towerjit::data
