#include "runtime/checkpoint/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "dsl/error.h"

namespace towerjit {
namespace {

// The pid the holder wrote, or "" when it cannot be read (the holder may be between taking
// the lock and writing it).
std::string recorded_pid(int fd) {
  char text[32] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) return "";
  std::string pid(text, static_cast<size_t>(n));
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid;
}

}  // namespace

std::string lock_file_path(const std::string& dir) { return (std::filesystem::path(dir) / ".lock").string(); }

DirectoryLock::DirectoryLock(const std::string& dir, Loc loc) : dir_(dir) {
  const std::string path = lock_file_path(dir);
  // flock, not fcntl locks: an fcntl lock is dropped when *any* descriptor of the file in the
  // process closes, and belongs to the process, so two hooks in one process would not exclude
  // each other. The file stays: removing it would let a third process lock a new inode.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  const int open_err = errno;
  user_check(fd >= 0, loc) << "cannot lock checkpoint directory \"" << dir << "\": opening \"" << path
                           << "\" failed: " << std::strerror(open_err)
                           << "; choose a checkpoint directory you can write";
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = err == EWOULDBLOCK ? recorded_pid(fd) : "";
    ::close(fd);
    user_check(err != EWOULDBLOCK, loc)
        << "checkpoint directory \"" << dir << "\" is in use by another run ("
        << (pid.empty() ? "its pid is not recorded yet" : "pid " + pid) << ", holding \"" << path
        << "\"): two runs saving to one directory would interleave their checkpoints and `latest`; "
           "wait for that run to finish or stop it, or give this run another checkpoint directory";
    user_check(false, loc) << "cannot lock checkpoint directory \"" << dir << "\": flock of \"" << path
                           << "\" failed: " << std::strerror(err)
                           << "; use a local file system that supports flock for checkpoints";
  }
  fd_ = fd;
  // For the message of a process that finds it held. Not worth failing over: the lock is taken.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd_, pid.data(), pid.size(), 0);
  }
}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    dir_ = std::move(other.dir_);
    other.fd_ = -1;
  }
  return *this;
}

void DirectoryLock::release() {
  if (fd_ < 0) return;
  ::close(fd_);  // closing the only descriptor of the open file drops the flock
  fd_ = -1;
}

}  // namespace towerjit
