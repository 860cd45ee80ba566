// What a machine may lack, made in a child process (tests/faults/programs/fault_child.cpp):
// every BLAS library (hidden in a private mount namespace), and read access to a data file and
// a checkpoint (mode 000, read as the user nobody). Each is an error naming what is missing,
// the caller's line, and what to do.
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include "tests/faults/child_process.h"
#include "tests/jit/cpu_test_env.h"

namespace tj = towerjit;
using Catch::Matchers::Contains;


TEST_CASE("no BLAS library on the machine is an error naming the package to install", "[faults]") {
  tj::test::TempDir work;
  const std::optional<std::string> run = tj::testing::run_fault_child({"noblas", work.path() + "/c"});
  if (!run) return;
  const std::string& out = *run;
  CHECK_THAT(out, Contains("error: towerjit: no BLAS library found (tried libopenblas.so.0, libopenblas.so, "
                           "libcblas.so.3, libblas.so.3); install Debian's libopenblas0 (scripts/install-deps.sh does)"));
}

TEST_CASE("a data file or a checkpoint that cannot be read names the file and the reason", "[faults]") {
  tj::test::TempDir work;
  ::chmod(work.path().c_str(), 0755);  // the user nobody may enter it (its files are mode 000)
  const std::optional<std::string> run = tj::testing::run_fault_child({"unreadable", work.path()});
  if (!run) return;
  const std::string& out = *run;
  CHECK_THAT(out, Contains("error: towerjit: cannot open \"" + work.path() +
                           "/train-labels-idx1-ubyte\"; check the path and its permissions") &&
                      Contains("fault_child.cpp:"));
  CHECK_THAT(out, Contains("error: towerjit: cannot read checkpoint \"" + work.path() +
                           "/ckpt-1.tjck\": Permission denied") &&
                      Contains("fault_child.cpp:"));
}
