// Convolutions on towerjit's own implicit GEMMs (jit/cuda/device/conv_kernels.cu): the f32
// passes of Conv2D without cuDNN, and a candidate beside cuDNN's algorithms where it is
// (conv_choice.h). 64 x 64 tiles of the product, a block each; no column buffer and no
// library call.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>

#include "jit/cuda/device/library_params.h"
#include "runtime/cuda/cudnn.h"
#include "runtime/cuda/device.h"

namespace towerjit::cuda {

// The scratch bytes the pass needs: the filter gradient's slices' partial products where its
// depth is cut into several; none otherwise.
size_t implicit_gemm_scratch_bytes(ConvPass pass, const TjConvShape& g);

// A forward pass's epilogue (kir::Epilogue): y = act(conv + bias[o]) as the kernel stores; none
// where `ptr` is 0.
struct ConvBias {
  CUdeviceptr ptr = 0;  // [O] f32
  bool relu = false;
};

// Queues the pass on `stream`: forward y = conv(x, w) (a = x, b = w), `bias` applied, data
// gradient dx (a = dy, b = w), filter gradient dw (a = x, b = dy). `scratch` holds at least
// implicit_gemm_scratch_bytes(pass, g). `what` names the op in a launch error.
void queue_implicit_gemm(ConvPass pass, const TjConvShape& g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr out,
                         CUdeviceptr scratch, const ConvBias& bias, DeviceContext& device, const Stream& stream,
                         const std::string& what, std::source_location loc);

}  // namespace towerjit::cuda
