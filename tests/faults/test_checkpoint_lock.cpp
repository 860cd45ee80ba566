// Two processes pointed at one checkpoint directory: the second fails at once, naming the
// directory, the first one's pid and the fixes, and writes nothing; the first trains on.
#include <catch2/catch.hpp>

#include <filesystem>
#include <signal.h>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/directory_lock.h"
#include "tests/faults/child_process.h"
#include "tests/jit/cpu_test_env.h"

namespace tj = towerjit;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using tj::testing::ChildProcess;

TEST_CASE("a second process saving to a checkpoint directory in use fails, naming the first one's pid",
          "[faults][checkpoint]") {
  tj::test::TempDir work;
  const std::string dir = work.path() + "/ckpt";
  ChildProcess first(tj::testing::fault_child_path(), {"train", dir, "100000000"});
  REQUIRE(!first.wait_for_line("start").empty());
  ChildProcess second(tj::testing::fault_child_path(), {"train", dir, "100000000"});
  const int code = second.exit_code();
  INFO(second.output());
  CHECK(code == 1);
  CHECK_THAT(second.output(), Contains("checkpoint directory \"" + dir + "\" is in use by another run (pid " +
                                       std::to_string(first.pid()) + ", holding \"" + dir + "/.lock\")") &&
                                  Contains("give this run another checkpoint directory"));
  CHECK(second.output().find("start") == std::string::npos);  // it never trained

  // In this process too: a third writer is refused while the first runs.
  CHECK_THROWS_WITH(tj::DirectoryLock(dir), Contains("pid " + std::to_string(first.pid())));

  // The first ran on undisturbed; SIGTERM stops it cleanly, and only its checkpoints are there.
  first.signal(SIGTERM);
  const int first_code = first.exit_code();
  INFO(first.output());
  CHECK(first_code == 143);
  CHECK_THAT(first.output(), Contains("training stopped by SIGTERM after step"));
  const tj::Checkpoint kept = tj::load_checkpoint(dir);
  CHECK(kept.step > 0);
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    INFO(name);
    CHECK((name == "latest" || name == ".lock" || (name.rfind("ckpt-", 0) == 0 && name.ends_with(".tjck"))));
  }
  // Free again once it ended.
  CHECK_NOTHROW(tj::DirectoryLock(dir));
}

TEST_CASE("the checkpoint directory lock is released with its holder and refuses a second holder in one process",
          "[faults][checkpoint]") {
  tj::test::TempDir work;
  {
    tj::DirectoryLock a(work.path());
    CHECK(a.held());
    CHECK_THROWS_WITH(tj::DirectoryLock(work.path()), Contains("is in use by another run (pid " + std::to_string(::getpid())));
  }
  CHECK_NOTHROW(tj::DirectoryLock(work.path()));
  CHECK_THROWS_WITH(tj::DirectoryLock(work.path() + "/missing"),
                    Contains("cannot lock checkpoint directory") && Contains("No such file or directory"));
}
