// The fixed CUDA sources under jit/cuda/device/, embedded at build time (jit/CMakeLists.txt
// reads the files into a generated .cpp), so the text NVRTC compiles is the text in the repo.
#pragma once

namespace towerjit::cuda {

extern const char kDevicePhilox[];          // device/philox.h: Philox, __host__ __device__
extern const char kDevicePreamble[];        // device/preamble.cuh: types, warp/block reduce
extern const char kDeviceLibraryParams[];   // device/library_params.h: parameter structs
extern const char kDeviceLibraryKernels[];  // device/library_kernels.cu: pools, gathers, attention, ...
extern const char kDeviceConvKernels[];     // device/conv_kernels.cu: convolutions as implicit GEMMs

}  // namespace towerjit::cuda
