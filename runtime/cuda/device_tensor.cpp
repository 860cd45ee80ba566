#include "runtime/cuda/device_tensor.h"

#include <cstring>

#include "dsl/error.h"

namespace towerjit {

DeviceTensor empty_device_tensor(cuda::DeviceContext& device, const Shape& shape, DType dtype) {
  DeviceTensor t;
  t.shape = shape;
  t.dtype = dtype;
  t.device = &device;
  t.buffer = device.allocate(t.bytes());
  return t;
}

DeviceTensor to_device(const HostTensor& h, cuda::DeviceContext& device, const cuda::Stream& stream) {
  DeviceTensor t = empty_device_tensor(device, h.shape, h.dtype);
  if (t.bytes() == 0) return t;
  cuda::PinnedBuffer staging(device.context());
  std::memcpy(staging.reserve(t.bytes()), h.data(), t.bytes());
  device.make_current();
  cuda::check_cuda(cuda::require_driver().MemcpyHtoDAsync(t.ptr(), staging.data(), t.bytes(), stream.handle()),
                  "cuMemcpyHtoDAsync");
  stream.synchronize("a copy to the device");
  return t;
}

HostTensor to_host(const DeviceTensor& t, const cuda::Stream& stream) {
  HostTensor h(t.shape, t.dtype);
  if (t.bytes() == 0) return h;
  internal_check(t.device) << "a device tensor without its device";
  cuda::PinnedBuffer staging(t.device->context());
  staging.reserve(t.bytes());
  t.device->make_current();
  cuda::check_cuda(cuda::require_driver().MemcpyDtoHAsync(staging.data(), t.ptr(), t.bytes(), stream.handle()),
                  "cuMemcpyDtoHAsync");
  stream.synchronize("a copy to the host");
  std::memcpy(h.data(), staging.data(), t.bytes());
  return h;
}

DeviceVariables to_device(const HostVariables& variables, cuda::DeviceContext& device, const cuda::Stream& stream) {
  DeviceVariables out;
  for (const auto& [name, t] : variables) out.emplace(name, to_device(t, device, stream));
  return out;
}

HostVariables to_host(const DeviceVariables& variables, const cuda::Stream& stream) {
  HostVariables out;
  for (const auto& [name, t] : variables) out.emplace(name, to_host(t, stream));
  return out;
}

}  // namespace towerjit
