// Replacing a file so that a reader, or a crash at any moment, sees either the old contents or
// the new, never a mix or an empty file.
#pragma once

#include <source_location>
#include <string>
#include <string_view>

namespace towerjit {

using Loc = std::source_location;

// Writes `bytes` to a temporary file next to `path` (".<name>.tmp-<pid>-<n>", created with
// O_EXCL so concurrent writers never share one), fsyncs it, renames it over `path`, then
// fsyncs the directory so the rename itself survives a power cut. Errors (towerjit::Error, at
// `loc`) name the path, the step that failed and the system's reason; the temporary file is
// removed, and `path` keeps its old contents unless the failure was the final directory fsync
// (the rename has happened; the message says so).
void write_file_atomically(const std::string& path, std::string_view bytes, Loc loc);

}  // namespace towerjit
