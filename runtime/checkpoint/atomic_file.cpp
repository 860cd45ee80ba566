#include "runtime/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <vector>
#include <system_error>

#include "dsl/error.h"

namespace towerjit {
namespace {

std::string reason(int err) { return std::generic_category().message(err); }

// The likely fix for a failed step, by its errno.
std::string hint(int err) {
  if (err == ENOSPC || err == EDQUOT) return "; the file system is full (or over quota): free space on it or choose another directory";
  if (err == EFBIG)
    return "; the file is larger than this process may write (its file-size limit, ulimit -f): raise the limit";
  return "; check that the directory exists, is writable and has space";
}

// 0, or the errno of the write that failed. write() may write less than asked (signals, large
// buffers), so it loops.
int write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

std::atomic<WritePhaseHook> phase_hook{nullptr};

void reached(WritePhase phase, const std::string& path) {
  if (const WritePhaseHook hook = phase_hook.load()) hook(phase, path);
}

// Tells apart the temporary files of one process's saves (the pid tells apart processes).
std::atomic<uint64_t> temporary_count{0};

}  // namespace

const char* write_phase_name(WritePhase phase) {
  switch (phase) {
    case WritePhase::created: return "created";
    case WritePhase::half_written: return "half_written";
    case WritePhase::written: return "written";
    case WritePhase::synced: return "synced";
    case WritePhase::renamed: return "renamed";
    case WritePhase::directory_synced: return "directory_synced";
  }
  return "?";
}

void set_write_phase_hook(WritePhaseHook hook) { phase_hook.store(hook); }

int sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  // EINVAL: a file system that cannot sync directories; there is nothing more to do.
  const int err = ::fsync(fd) != 0 && errno != EINVAL ? errno : 0;
  ::close(fd);
  return err;
}

bool create_directories_durably(const std::string& dir, std::error_code& ec) {
  namespace fs = std::filesystem;
  // The levels that do not exist yet: each new entry lives in its parent, which must be
  // fsynced for the entry to survive a power cut.
  std::vector<fs::path> missing;
  for (fs::path p = fs::absolute(dir, ec); !ec && !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  if (ec) return false;
  const bool created = fs::create_directories(dir, ec);
  if (ec) return false;
  for (const fs::path& p : missing) sync_directory(p.parent_path().string());  // durability only: not worth failing
  return created;
}

void write_file_atomically(const std::string& path, std::string_view bytes, Loc loc) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();

  // 0666 as for any new file: the user's umask decides, as it would with fopen.
  // (Appended piece by piece: g++ 12 warns falsely (-Wrestrict) on "." + std::string.)
  std::string prefix = ".";
  prefix.append(target.filename().string()).append(".tmp-").append(std::to_string(::getpid())).append("-");
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temporary = (dir / (prefix + std::to_string(temporary_count++))).string();
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    const int err = errno;
    user_check(fd >= 0 || (err == EEXIST && attempt < 100), loc)
        << "cannot write \"" << path << "\": creating the temporary file \"" << temporary
        << "\" failed: " << reason(err) << hint(err);
  }
  // Every failure from here removes the temporary file; `path` is untouched until the rename.
  auto fail = [&](const std::string& step, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(temporary.c_str());
    user_check(false, loc) << "cannot write \"" << path << "\": " << step << " failed: " << reason(err) << hint(err);
  };
  reached(WritePhase::created, path);
  // In two halves only so a crash test can stop the process between them (a torn file).
  const std::string_view first = bytes.substr(0, bytes.size() / 2), second = bytes.substr(first.size());
  if (const int err = write_all(fd, first)) fail("writing \"" + temporary + "\"", err);
  reached(WritePhase::half_written, path);
  if (const int err = write_all(fd, second)) fail("writing \"" + temporary + "\"", err);
  reached(WritePhase::written, path);
  if (::fsync(fd) != 0) fail("fsync of \"" + temporary + "\"", errno);
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) fail("closing \"" + temporary + "\"", errno);
  reached(WritePhase::synced, path);
  if (::rename(temporary.c_str(), path.c_str()) != 0) fail("renaming \"" + temporary + "\" to it", errno);
  reached(WritePhase::renamed, path);

  // Without this the rename may be lost in a power cut, leaving the old file.
  const int err = sync_directory(dir.string());
  if (err == 0) reached(WritePhase::directory_synced, path);
  user_check(err == 0, loc) << "\"" << path << "\" was written, but fsync of its directory \"" << dir.string()
                            << "\" failed: " << reason(err) << "; it may not survive a power cut";
}

}  // namespace towerjit
