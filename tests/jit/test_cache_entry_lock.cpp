// The lock a measured cache entry's maker holds (jit/cpu/cache_entry_lock.h): exclusive among
// threads and processes, bounded in its wait, dropped when its holder dies, and no failure
// where the cache cannot hold a lock file.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>

#include "jit/cpu/cache_entry_lock.h"
#include "tests/jit/cpu_test_env.h"

namespace cpujit = towerjit::cpujit;
using namespace std::chrono_literals;

TEST_CASE("cache entry lock: one holder at a time, and a bounded wait", "[cache]") {
  towerjit::test::TempDir dir;
  const cpujit::CompileCache cache(dir.path() + "/cache");  // made by the lock
  std::optional<cpujit::CacheEntryLock> first;
  first.emplace(cache, "entry", 0ms);
  REQUIRE(first->held());
  const auto start = std::chrono::steady_clock::now();
  {
    const cpujit::CacheEntryLock second(cache, "entry", 50ms);
    CHECK_FALSE(second.held());
  }
  CHECK(std::chrono::steady_clock::now() - start >= 50ms);
  const cpujit::CacheEntryLock other(cache, "another entry", 0ms);
  CHECK(other.held());  // a lock an entry
  first.reset();
  const cpujit::CacheEntryLock third(cache, "entry", 0ms);
  CHECK(third.held());
}

TEST_CASE("cache entry lock: a process that dies holding it releases it", "[cache]") {
  towerjit::test::TempDir dir;
  const cpujit::CompileCache cache(dir.path());
  const std::string path = cache.entry_path("entry") + ".lock";
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // only calls safe after fork in a threaded process
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(1);
    const char byte = 1;
    if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  ::close(ready[0]);
  ::close(ready[1]);
  {
    const cpujit::CacheEntryLock waiting(cache, "entry", 30ms);
    CHECK_FALSE(waiting.held());
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  const cpujit::CacheEntryLock after(cache, "entry", 1000ms);
  CHECK(after.held());
}

TEST_CASE("cache entry lock: a cache that cannot hold a lock file gives none, and no error", "[cache]") {
  towerjit::test::TempDir dir;
  std::ofstream(dir.path() + "/a file") << "x";
  const cpujit::CompileCache cache(dir.path() + "/a file/cache");  // under a file: no directory
  const cpujit::CacheEntryLock lock(cache, "entry", 10ms);
  CHECK_FALSE(lock.held());
}
