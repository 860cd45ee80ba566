// NumPy's .npz format: a zip archive of .npy files, one per array, named "<array>.npy", as
// numpy.savez (members stored) and numpy.savez_compressed (members deflated) write it. The
// archive is read from its central directory; each member's CRC-32 is checked.
#pragma once

#include <map>
#include <source_location>
#include <string>
#include <string_view>

#include "runtime/data/npy.h"
#include "runtime/host_tensor.h"

namespace towerjit::data {

// Every array of an .npz archive by name (the member's name without ".npy"), each read as
// load_npy reads a file (npy.h: dtypes, byte orders, Fortran order).
// Errors (towerjit::Error at `loc`, naming the file and, where it is about one, the member): a
// missing file, not a zip archive, a damaged or truncated central directory or member (offsets
// and sizes are checked against the file before anything is allocated or inflated; a deflated
// member may not claim more than deflate can expand to), a compression other than stored or
// deflate, encryption, a CRC-32 mismatch, a member that is not .npy, two members of one name,
// and every error of parse_npy.
std::map<std::string, NpyArray> load_npz_arrays(const std::string& path,
                                                std::source_location loc = std::source_location::current());
HostFeeds load_npz(const std::string& path, std::source_location loc = std::source_location::current());

// The same from the archive's bytes; `file` names it in errors.
std::map<std::string, NpyArray> parse_npz(std::string_view bytes, const std::string& file, std::source_location loc);

}  // namespace towerjit::data
