// Catch2's main, plus two rules for ctest's reruns of the [isa] cases at every level
// (tests/CMakeLists.txt, which passes --isa-rerun first): a level this CPU lacks says so and exits
// 77, which ctest reports as skipped, instead of failing every case with the same error; and so
// does the CPU's widest level, at which the suite's own entries have run those cases already
// (under ASan a rerun costs about 48 s).
#include <cstdio>
#include <cstring>

#include "dsl/error.h"
#include "jit/cpu/cpu_isa.h"
#include "tests/catch/run.h"

int main(int argc, char* argv[]) {
  namespace cpujit = towerjit::cpujit;
  const bool rerun = argc > 1 && std::strcmp(argv[1], "--isa-rerun") == 0;
  if (rerun) {  // the flag is ours, not Catch's
    argv[1] = argv[0];
    ++argv;
    --argc;
  }
  try {
    if (rerun && cpujit::cpu_isa() == cpujit::widest_isa()) {
      std::printf("skipped: %s is this CPU's widest level, where the suite's own entries run these cases\n",
                  cpujit::isa_name(cpujit::cpu_isa()));
      return 77;
    }
  } catch (const towerjit::Error& e) {
    std::printf("skipped: %s\n", e.what());
    return 77;
  }
  return run_catch_session(argc, argv);
}
