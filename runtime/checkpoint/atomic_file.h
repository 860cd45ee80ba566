// Replacing a file so that a reader, or a crash at any moment, sees either the old contents or
// the new, never a mix or an empty file.
#pragma once

#include <source_location>
#include <string>
#include <string_view>
#include <system_error>

namespace towerjit {

using Loc = std::source_location;

// Writes `bytes` to a temporary file next to `path` (".<name>.tmp-<pid>-<n>", created with
// O_EXCL so concurrent writers never share one), fsyncs it, renames it over `path`, then
// fsyncs the directory so the rename itself survives a power cut. Errors (towerjit::Error, at
// `loc`) name the path, the step that failed and the system's reason; the temporary file is
// removed, and `path` keeps its old contents unless the failure was the final directory fsync
// (the rename has happened; the message says so).
void write_file_atomically(const std::string& path, std::string_view bytes, Loc loc);

// The moments of write_file_atomically, in order: the temporary file created (empty), half of
// the bytes written, all written, fsynced and closed, renamed over `path`, the directory
// fsynced. A crash before `renamed` leaves `path` as it was; from `renamed` on, it is new.
enum class WritePhase { created, half_written, written, synced, renamed, directory_synced };
const char* write_phase_name(WritePhase phase);  // "created", "half_written", ...

// fsync of a directory, so the entries created, renamed or removed in it survive a power cut.
// 0, or the errno (a file system that cannot sync directories counts as done).
int sync_directory(const std::string& dir);

// std::filesystem::create_directories, then an fsync of the parent of every level it created,
// so the new directories survive a power cut. Returns whether it created any; `ec` as
// create_directories sets it.
bool create_directories_durably(const std::string& dir, std::error_code& ec);

// For tests of crash safety only: `hook` is called at every phase of every write in this
// process with the final path (e.g. to stop the process there with SIGSTOP, so a test can
// SIGKILL it at exactly that point). nullptr, the default, removes it.
using WritePhaseHook = void (*)(WritePhase phase, const std::string& path);
void set_write_phase_hook(WritePhaseHook hook);

}  // namespace towerjit
