// Catch2's main, plus one rule: a run under a TOWERJIT_CPU_ISA level this CPU lacks (ctest runs
// the [isa] cases at every level, tests/CMakeLists.txt) says so and exits 77, which ctest reports
// as skipped, instead of failing every case with the same error.
#include <cstdio>

#include "dsl/error.h"
#include "jit/cpu/cpu_isa.h"
#include "tests/catch/run.h"

int main(int argc, char* argv[]) {
  try {
    towerjit::cpujit::cpu_isa();
  } catch (const towerjit::Error& e) {
    std::printf("skipped: %s\n", e.what());
    return 77;
  }
  return run_catch_session(argc, argv);
}
