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
  upload(h, t, stream);
  return t;
}

void upload(const HostTensor& h, DeviceTensor& t, const cuda::Stream& stream) {
  internal_check(t.device && h.shape == t.shape && h.dtype == t.dtype)
      << "an upload of " << h.shape.str() << " into a device tensor of " << t.shape.str();
  if (t.bytes() == 0) return;
  cuda::PinnedBuffer staging(t.device->context());
  std::memcpy(staging.reserve(t.bytes()), h.data(), t.bytes());
  t.device->make_current();
  cuda::check_cuda(cuda::require_driver().MemcpyHtoDAsync(t.ptr(), staging.data(), t.bytes(), stream.handle()),
                  "cuMemcpyHtoDAsync");
  stream.synchronize("a copy to the device");
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
