#include "jit/cpu/cache_entry_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <thread>

namespace towerjit::cpujit {

CacheEntryLock::CacheEntryLock(const CompileCache& cache, const std::string& key, std::chrono::milliseconds wait) {
  std::error_code ec;
  std::filesystem::create_directories(cache.dir(), ec);
  const std::string path = cache.entry_path(key) + ".lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  // Polled rather than blocking, so that the wait is bounded; a choice is timed in tens of
  // milliseconds, so 5 ms steps cost little.
  const auto give_up = std::chrono::steady_clock::now() + wait;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK || std::chrono::steady_clock::now() >= give_up) {
      ::close(fd);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  fd_ = fd;
}

CacheEntryLock::~CacheEntryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor of the open file drops the flock
}

}  // namespace towerjit::cpujit
