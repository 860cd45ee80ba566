// The GPU's library routines: what the kernel IR leaves to hand-written code, as on the CPU
// (runtime/cpu/library.h). Matrix products go to cuBLAS; convolutions to cuDNN (cudnn.h) or to
// implicit GEMMs of towerjit's own (implicit_gemm_conv.h), as conv_choice.h chose per shape; pools,
// one-hot, argmax, pad and concat to the library kernels of jit/cuda/device/library_kernels.cu. jit/cuda/cuda_dump.h's library_routine()
// names what each call runs.
#pragma once

#include <string>
#include <vector>

#include "dsl/graph.h"
#include "jit/kir/kernel_ir.h"
#include "runtime/cuda/cublas.h"
#include "runtime/cuda/cudnn.h"
#include "runtime/cuda/module.h"

namespace towerjit::cuda {

// A buffer as a library routine sees it: its bound shape, its device address and its elements'
// type (a matrix product's operands may be bf16 or f16).
struct DeviceView {
  Shape shape;  // concrete
  CUdeviceptr ptr = 0;
  DType dtype = DType::f32;
};

// What a library call runs with: the device, its stream and cuBLAS handle, scratch memory
// (cuDNN's workspace, partial sums: at least library_scratch_bytes() of every call of the run), and the
// one-hot error slot of the call.
struct LibraryEnv {
  DeviceContext& device;
  const Stream& stream;
  Cublas* blas;  // null for programs without matrix products
  DeviceBuffer& scratch;
  // One-hot calls report a label out of range through an 8-byte slot each (set to all ones
  // before the launch); the runtime reads them after the run and raises the CPU's error.
  CUdeviceptr error_slot = 0;
  // Convolutions go to cuDNN through this handle where conv_choice.h chose it; null: to the
  // implicit GEMMs.
  Cudnn* dnn = nullptr;
};

// Queues one library call on env.stream. `node` is the graph node it computes (for errors).
void run_library_call(const kir::LibraryCall& call, const Node& node, const std::vector<DeviceView>& inputs,
                      const DeviceView& output, LibraryEnv& env);

// The scratch bytes a call needs at these bound shapes (the runtime allocates the largest
// before a run, so nothing is allocated or freed while the stream works). With `dnn`, a
// convolution's is its cuDNN algorithm's workspace: the algorithm is found here, on the first
// sight of the shape (synchronising dnn's stream), so call it before queuing the run.
size_t library_scratch_bytes(const kir::LibraryCall& call, const Node& node, const std::vector<Shape>& inputs,
                             const Shape& output, Cudnn* dnn);

// Queues x[i] = float(s * double(x[i])) over `count` floats at `x` on `stream` (the host's
// rounding of a double factor, bitwise). `what` names the work for a launch error.
void scale_floats(DeviceContext& device, CUdeviceptr x, int64_t count, double s, const Stream& stream,
                  const std::string& what, std::source_location loc);

// A copy within one device: `bytes` from `src` to `dst`.
struct DeviceCopy {
  CUdeviceptr dst = 0, src = 0;
  size_t bytes = 0;
};
// Queues `copies`, all within `device`, on `stream`: tj_copy_words for up to TJ_COPY_JOBS at a
// launch where each is whole 4-byte words at 4-byte addresses, else cuMemcpyDtoDAsync each. One
// launch for a step's many small copies, where a copy call each costs a launch each.
void copy_within(DeviceContext& device, const std::vector<DeviceCopy>& copies, const Stream& stream,
                 const std::string& what, std::source_location loc);

// The error a one-hot call raises for the slot value it left (~0: none), as the CPU's.
void check_one_hot_slot(const Node& node, uint64_t slot);
// The same for a gather or its gradient: `table` and `indices` are the shapes the graph gives
// them (the message unravels the position where B is absent or the indices' first axis).
void check_gather_slot(const Node& node, const Shape& table, const Shape& indices, uint64_t slot);

}  // namespace towerjit::cuda
