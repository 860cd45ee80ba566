#include "runtime/cuda/device.h"

#include <array>
#include <sstream>
#include <vector>

#include "dsl/error.h"
#include "jit/cuda/cuda_emitter.h"
#include "runtime/cuda/module.h"

namespace towerjit::cuda {

DeviceContext::DeviceContext(int ordinal, std::source_location loc) : ordinal_(ordinal) {
  const DriverApi& api = require_driver(loc);
  const std::string on = " for gpu:" + std::to_string(ordinal);
  check_cuda(api.DeviceGet(&device_, ordinal), "cuDeviceGet", on, loc);
  std::array<char, 256> name{};
  check_cuda(api.DeviceGetName(name.data(), static_cast<int>(name.size()) - 1, device_), "cuDeviceGetName", on, loc);
  name_ = name.data();
  check_cuda(api.DeviceGetAttribute(&cc_major_, kAttrComputeCapabilityMajor, device_), "cuDeviceGetAttribute", on, loc);
  check_cuda(api.DeviceGetAttribute(&cc_minor_, kAttrComputeCapabilityMinor, device_), "cuDeviceGetAttribute", on, loc);
  check_cuda(api.DeviceGetAttribute(&sm_count_, kAttrMultiprocessorCount, device_), "cuDeviceGetAttribute", on, loc);
  check_cuda(api.DeviceTotalMem(&total_memory_, device_), "cuDeviceTotalMem", on, loc);
  check_cuda(api.DevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain", on, loc);
  allocator_ = std::make_unique<DeviceAllocator>(ordinal, context_);
}

// Never runs for the process-wide devices (they live until exit); kept for completeness.
DeviceContext::~DeviceContext() = default;

std::string DeviceContext::arch() const { return "sm_" + std::to_string(cc_major_ * 10 + cc_minor_); }

std::string DeviceContext::str() const {
  std::ostringstream out;
  out.precision(1);
  out << "gpu:" << ordinal_ << " (" << name_ << ", " << arch() << ", " << sm_count_ << " SMs, " << std::fixed
      << static_cast<double>(total_memory_) / (1 << 30) << " GiB)";
  return out.str();
}

void DeviceContext::make_current() const {
  check_cuda(require_driver().CtxSetCurrent(context_), "cuCtxSetCurrent", " for gpu:" + std::to_string(ordinal_));
}

void DeviceContext::synchronize() const {
  make_current();
  check_cuda(require_driver().CtxSynchronize(), "cuCtxSynchronize", " on gpu:" + std::to_string(ordinal_));
}

const LoadedModule& DeviceContext::library_module() {
  std::call_once(library_once_, [this] {
    const std::string arch = cuda::resolve_arch("", this->arch());
    library_ = std::make_unique<LoadedModule>(*this, cuda::compile_cuda(cuda::library_module_source(), "towerjit_library", arch),
                                              "towerjit_library");
  });
  return *library_;
}

DeviceContext& device(int ordinal, std::source_location loc) {
  require_driver(loc);  // "no CUDA device: ..." comes first
  const int count = cuda_device_count();
  user_check(ordinal >= 0 && ordinal < count, loc)
      << "no CUDA device gpu:" << ordinal << ": this machine has " << count << " (gpu:0"
      << (count > 1 ? " to gpu:" + std::to_string(count - 1) : std::string()) << "); pick one of those";
  // Created on first use and never destroyed: streams, buffers and modules of static
  // objects may outlive any order of destruction we could choose. The list is never destroyed
  // either: a static vector would free its array at exit and leave the devices reachable from
  // nowhere, a leak to LeakSanitizer (docs/sanitizers.md).
  static std::mutex mutex;
  static auto* const devices = new std::vector<DeviceContext*>(count, nullptr);
  std::lock_guard<std::mutex> lock(mutex);
  DeviceContext*& slot = (*devices)[ordinal];
  if (!slot) slot = new DeviceContext(ordinal, loc);
  return *slot;
}

Stream::Stream(DeviceContext& device) : device_(&device) {
  device.make_current();
  check_cuda(require_driver().StreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate");
}

Stream::~Stream() {
  if (!stream_) return;
  try {
    const DriverApi& api = require_driver();
    api.CtxSetCurrent(device_->context());
    api.StreamDestroy(stream_);  // the driver lets queued work finish first
  } catch (...) {
  }
}

void Stream::synchronize(const std::string& what, std::source_location loc) const {
  device_->make_current();
  check_cuda(require_driver().StreamSynchronize(stream_), "cuStreamSynchronize",
             what.empty() ? std::string() : " after " + what, loc);
}

void Stream::wait(const Event& event) const {
  device_->make_current();
  check_cuda(require_driver().StreamWaitEvent(stream_, event.handle(), 0), "cuStreamWaitEvent");
}

Event::Event(DeviceContext& device, bool timing) : device_(&device) {
  device.make_current();
  check_cuda(require_driver().EventCreate(&event_, timing ? kEventDefault : kEventDisableTiming), "cuEventCreate");
}

Event::~Event() {
  if (!event_) return;
  try {
    const DriverApi& api = require_driver();
    api.CtxSetCurrent(device_->context());
    api.EventDestroy(event_);
  } catch (...) {
  }
}

void Event::record(const Stream& stream) {
  internal_check(&stream.device() == device_) << "an event recorded on another device's stream";
  device_->make_current();
  check_cuda(require_driver().EventRecord(event_, stream.handle()), "cuEventRecord");
}

void Event::synchronize() const {
  device_->make_current();
  check_cuda(require_driver().EventSynchronize(event_), "cuEventSynchronize");
}

bool Event::ready() const {
  device_->make_current();
  const CuResult r = require_driver().EventQuery(event_);
  if (r == kCudaErrorNotReady) return false;
  check_cuda(r, "cuEventQuery");
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  device_->make_current();
  check_cuda(require_driver().EventElapsedTime(&ms, event_, end.event_), "cuEventElapsedTime");
  return ms;
}

void copy_async(CUdeviceptr dst, DeviceContext& dst_device, CUdeviceptr src, DeviceContext& src_device,
                size_t bytes, const Stream& stream) {
  if (bytes == 0) return;
  const DriverApi& api = require_driver();
  stream.device().make_current();
  if (&dst_device == &src_device) {
    check_cuda(api.MemcpyDtoDAsync(dst, src, bytes, stream.handle()), "cuMemcpyDtoDAsync");
  } else {
    check_cuda(api.MemcpyPeerAsync(dst, dst_device.context(), src, src_device.context(), bytes, stream.handle()),
               "cuMemcpyPeerAsync",
               " from gpu:" + std::to_string(src_device.ordinal()) + " to gpu:" + std::to_string(dst_device.ordinal()));
  }
}

bool enable_peer_access(DeviceContext& from, DeviceContext& to) {
  if (&from == &to) return true;
  const DriverApi& api = require_driver();
  int can = 0;
  check_cuda(api.DeviceCanAccessPeer(&can, from.handle(), to.handle()), "cuDeviceCanAccessPeer");
  if (!can) return false;
  from.make_current();
  const CuResult r = api.CtxEnablePeerAccess(to.context(), 0);
  if (r == kCudaErrorPeerAccessAlreadyEnabled) return true;
  check_cuda(r, "cuCtxEnablePeerAccess",
             " from gpu:" + std::to_string(from.ordinal()) + " to gpu:" + std::to_string(to.ordinal()));
  return true;
}

}  // namespace towerjit::cuda
