// The emulation headers a module is compiled with, embedded at build time
// (emulator/CMakeLists.txt), so the text g++ compiles is the text in the repo.
#pragma once

namespace towerjit::emulator {

extern const char kCudaHostHeader[];     // kernel/cuda_host.h
extern const char kCudaHostApiHeader[];  // kernel/cuda_host_api.h
extern const char kCudaHostHalfHeader[];  // kernel/cuda_host_half.h

}  // namespace towerjit::emulator
