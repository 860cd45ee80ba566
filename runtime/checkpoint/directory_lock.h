// One writer per checkpoint directory: an advisory lock (flock) on <dir>/.lock, so two runs
// pointed at the same directory fail at once with a clear error instead of interleaving their
// checkpoints and `latest`.
#pragma once

#include <source_location>
#include <string>

namespace towerjit {

using Loc = std::source_location;

class DirectoryLock {
 public:
  DirectoryLock() = default;  // holds nothing
  // Takes the lock on <dir>/.lock (creating the file; `dir` must exist) and writes this
  // process's pid into it, for the error another process gets. Never waits. The kernel drops
  // the lock when the process ends however it ends (SIGKILL included), so a crashed run never
  // leaves a directory locked. Errors (towerjit::Error, at `loc`): another open lock holds it
  // (naming the directory, the holder's pid as it recorded it, and the fixes), or the lock
  // file cannot be opened or locked (the system's reason).
  explicit DirectoryLock(const std::string& dir, Loc loc = Loc::current());
  ~DirectoryLock() { release(); }
  DirectoryLock(DirectoryLock&& other) noexcept : fd_(other.fd_), dir_(std::move(other.dir_)) { other.fd_ = -1; }
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  void release();
  bool held() const { return fd_ >= 0; }
  const std::string& dir() const { return dir_; }

 private:
  int fd_ = -1;
  std::string dir_;
};

// The lock file's path in `dir`: "<dir>/.lock".
std::string lock_file_path(const std::string& dir);

}  // namespace towerjit
