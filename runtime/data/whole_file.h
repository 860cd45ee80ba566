// A data or weights file read whole into memory, for the readers that decode it from bytes
// (npy.h, npz.h, interop/safetensors.h), with the one pair of messages they share.
#pragma once

#include <source_location>
#include <string>

#include "dsl/error.h"

namespace towerjit::data {

// The bytes of `path`. Errors (at `loc`): no such regular file, or one that cannot be opened.
std::string read_whole_file(const std::string& path, std::source_location loc);

}  // namespace towerjit::data
