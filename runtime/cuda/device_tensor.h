// A tensor's value in GPU memory, and the copies between it and a HostTensor. Feeds and
// variables kept on the device this way let a training loop run step after step without
// moving the weights through the host (CudaProgram::run's DeviceVariables overloads).
#pragma once

#include <map>
#include <string>

#include "runtime/cuda/device.h"
#include "runtime/host_tensor.h"

namespace towerjit {

struct DeviceTensor {
  Shape shape;  // concrete
  DType dtype = DType::f32;
  cuda::DeviceBuffer buffer;  // shape.elements(0) * dtype_bytes(dtype) bytes
  cuda::DeviceContext* device = nullptr;

  int64_t size() const { return shape.elements(0); }
  size_t bytes() const { return static_cast<size_t>(size()) * dtype_bytes(dtype); }
  CUdeviceptr ptr() const { return buffer.ptr(); }
};

// As runtime/cpu/cpu_program.h declares them (the same types).
using HostFeeds = std::map<std::string, HostTensor>;
using HostVariables = std::map<std::string, HostTensor>;

using DeviceFeeds = std::map<std::string, DeviceTensor>;
using DeviceVariables = std::map<std::string, DeviceTensor>;

// An uninitialised device tensor of this shape and dtype.
DeviceTensor empty_device_tensor(cuda::DeviceContext& device, const Shape& shape, DType dtype);

// Copies `t` to `device` (through page-locked staging on `stream`) and waits for the copy.
DeviceTensor to_device(const HostTensor& t, cuda::DeviceContext& device, const cuda::Stream& stream);
// Copies `value` into `into` (same shape and dtype, which keeps its address: programs fed
// with it replay their CUDA graphs) on `stream`, and waits for the copy.
void upload(const HostTensor& value, DeviceTensor& into, const cuda::Stream& stream);
// Copies `t` to the host and waits for the copy.
HostTensor to_host(const DeviceTensor& t, const cuda::Stream& stream);

DeviceVariables to_device(const HostVariables& variables, cuda::DeviceContext& device, const cuda::Stream& stream);
HostVariables to_host(const DeviceVariables& variables, const cuda::Stream& stream);

}  // namespace towerjit
