// The bytes the library kernels (jit/cuda/device/library_kernels.cu, conv_kernels.cu) move,
// computed from the parameters of a launch, for the launch records: each input element read
// once and each output element written once (what a GPU's caches make of the pools' overlapping
// windows and the implicit GEMMs' rereads of a tile's operands, to first order). Loop kernels
// are not here: their bytes come from
// the program's index (jit/dump.h).
#pragma once

#include <string>

namespace towerjit::emulator {

struct KernelCost {
  double bytes = 0, flops = 0;
};

// `params`: the launch's parameters as the driver API gives them. Zero for a kernel that is
// not a library kernel.
KernelCost library_kernel_cost(const std::string& kernel, void** params);

}  // namespace towerjit::emulator
