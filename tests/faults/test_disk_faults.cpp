// A checkpoint write that the disk refuses: a full file system (ENOSPC, a real tmpfs in a
// private mount namespace of the child) and a file-size limit (RLIMIT_FSIZE with SIGXFSZ
// ignored: EFBIG). Each must stop training with an error naming the file and the system's
// reason, leave no temporary file, and leave the previous checkpoint loadable.
#include <catch2/catch.hpp>

#include <filesystem>

#include "tests/faults/child_process.h"
#include "tests/jit/cpu_test_env.h"

namespace tj = towerjit;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

void check_stopped_cleanly(const std::string& out, const std::string& file, const std::string& reason,
                           const std::string& kept) {
  INFO(out);
  CHECK_THAT(out, Contains("error: towerjit: cannot write \"" + file + "\"") && Contains(reason));
  CHECK_THAT(out, Contains("training stopped at step 3: the newest checkpoint, " + kept + ", is kept"));
  CHECK_THAT(out, Contains("loaded step 2"));
  CHECK_THAT(out, Contains("temporaries 0"));
  CHECK_THAT(out, Contains("ckpt-3.tjck absent"));  // not even when only `latest` failed
}

}  // namespace

TEST_CASE("a full disk during a checkpoint write stops training and keeps the previous checkpoint",
          "[faults][checkpoint]") {
  tj::test::TempDir work;
  const std::string dir = work.path() + "/mnt";
  fs::create_directories(dir);
  for (const std::string which : {"ckpt", "latest"}) {
    INFO("the disk fills before the write of " << which);
    const std::optional<std::string> run = tj::testing::run_fault_child({"enospc", dir, which});
    if (!run) return;  // (the EFBIG test below still covers a refused write)
    const std::string& out = *run;
    const std::string failed = which == "ckpt" ? dir + "/ckpt-3.tjck" : dir + "/latest";
    check_stopped_cleanly(out, failed, "No space left on device", dir + "/ckpt-2.tjck");
    CHECK(fs::is_empty(dir));  // the tmpfs was the child's alone
  }
}

TEST_CASE("a file-size limit during a checkpoint write stops training and keeps the previous checkpoint",
          "[faults][checkpoint]") {
  tj::test::TempDir work;
  const std::string dir = work.path() + "/ckpt";
  const std::string out = tj::testing::run_fault_child({"efbig", dir}).value_or("not run");
  check_stopped_cleanly(out, dir + "/ckpt-3.tjck", "File too large", dir + "/ckpt-2.tjck");
}
