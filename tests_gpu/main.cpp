// The `gpu` tests' main: where no CUDA device is present it says why and exits with 77, which
// ctest reports as "Skipped" (SKIP_RETURN_CODE, tests_gpu/CMakeLists.txt), so a run without a
// GPU shows every gpu test as skipped rather than passed. Listing the tests (what ctest's
// discovery does at build time) needs no device. On the emulated GPU (TOWERJIT_CUDA=emulator)
// the cases run on two devices unless TOWERJIT_EMULATED_GPUS says otherwise, so the two-GPU
// paths (peer copies, NCCL) run everywhere.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/cuda/driver_api.h"
#include "tests/catch/run.h"

namespace {
constexpr int kSkipped = 77;

bool only_lists(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--list", 0) == 0 || a == "-l" || a == "-t" || a == "-h" || a == "--help" || a == "-?") return true;
  }
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  const char* backend = std::getenv("TOWERJIT_CUDA");
  if (backend && std::string(backend) == "emulator") ::setenv("TOWERJIT_EMULATED_GPUS", "2", /*overwrite=*/0);
  if (!only_lists(argc, argv) && !towerjit::cuda::cuda_available()) {
    std::printf("SKIPPED: no CUDA device (%s); the gpu tests need an NVIDIA GPU and its driver\n",
                towerjit::cuda::cuda_unavailable_reason().c_str());
    return kSkipped;
  }
  return run_catch_session(argc, argv);
}
