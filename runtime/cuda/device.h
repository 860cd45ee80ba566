// CUDA devices, streams and events. Each device is used through its primary context (the one
// the CUDA runtime, cuBLAS and NCCL use too), retained once per process and kept for its
// lifetime. Several towers may share one GPU, each on a stream of its own; events order work
// across streams and time it; device-to-device copies work within a GPU and between GPUs.
//
//   cuda::DeviceContext& dev = cuda::device(0);   // throws "no CUDA device: ..." without one
//   cuda::Stream stream(dev);
//   cuda::DeviceBuffer buf = dev.allocate(bytes);
//
// Every call that issues work makes the device's context current on the calling thread first,
// so towers may run on threads of their own.
#pragma once

#include <memory>
#include <mutex>
#include <source_location>
#include <string>

#include "runtime/cuda/driver_api.h"
#include "runtime/cuda/memory.h"

namespace towerjit::cuda {

class LoadedModule;

class DeviceContext {
 public:
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int ordinal() const { return ordinal_; }
  const std::string& name() const { return name_; }  // "NVIDIA H200"
  int cc_major() const { return cc_major_; }
  int cc_minor() const { return cc_minor_; }
  std::string arch() const;  // "sm_90": what NVRTC compiles for on this device
  int sm_count() const { return sm_count_; }
  size_t total_memory() const { return total_memory_; }
  CUdevice handle() const { return device_; }
  CUcontext context() const { return context_; }
  // "gpu:0 (NVIDIA H200, sm_90, 132 SMs, 140.4 GiB)".
  std::string str() const;

  // Makes this device's context current on the calling thread.
  void make_current() const;
  // Waits for all work on the device.
  void synchronize() const;

  DeviceAllocator& allocator() { return *allocator_; }
  DeviceBuffer allocate(size_t bytes, std::source_location loc = std::source_location::current()) {
    return allocator_->allocate(bytes, loc);
  }

  // The library kernels (jit/cuda/device/library_kernels.cu) compiled for this device and
  // loaded, once per process (thread-safe).
  const LoadedModule& library_module();

 private:
  friend DeviceContext& device(int ordinal, std::source_location loc);
  DeviceContext(int ordinal, std::source_location loc);

  int ordinal_ = 0;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  std::string name_;
  int cc_major_ = 0, cc_minor_ = 0, sm_count_ = 0;
  size_t total_memory_ = 0;
  std::unique_ptr<DeviceAllocator> allocator_;
  std::once_flag library_once_;
  std::unique_ptr<LoadedModule> library_;
};

// The device `ordinal` (0-based), set up on first use and kept for the process. Throws
// towerjit::Error naming `loc`: "no CUDA device: <why>" without a driver or device, or "no
// CUDA device gpu:N: this machine has M" for an ordinal past the last.
DeviceContext& device(int ordinal = 0, std::source_location loc = std::source_location::current());

class Event;

// A non-blocking stream (it does not wait for the legacy default stream). Not copyable.
class Stream {
 public:
  explicit Stream(DeviceContext& device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  CUstream handle() const { return stream_; }
  DeviceContext& device() const { return *device_; }
  // Waits for everything queued on the stream. A failure of earlier asynchronous work (a
  // kernel's illegal address, say) surfaces here, as an Error naming `what`.
  void synchronize(const std::string& what = "",
                   std::source_location loc = std::source_location::current()) const;
  // Work queued on this stream after the call waits for `event` (recorded on any stream of
  // any device).
  void wait(const Event& event) const;

 private:
  DeviceContext* device_;
  CUstream stream_ = nullptr;
};

// A point in a stream's work: record it, then wait for it on the host or another stream, or
// time the work between two of them.
class Event {
 public:
  explicit Event(DeviceContext& device, bool timing = true);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  CUevent handle() const { return event_; }
  void record(const Stream& stream);
  void synchronize() const;
  bool ready() const;  // everything before the record has run
  // Milliseconds from this event to `end`, both recorded, with timing, and complete.
  float elapsed_ms(const Event& end) const;

 private:
  DeviceContext* device_;
  CUevent event_ = nullptr;
};

// Queues a copy of `bytes` from `src` on `src_device` to `dst` on `dst_device` on `stream`
// (cuMemcpyDtoDAsync within a GPU, cuMemcpyPeerAsync between two, staged by the driver when
// peer access is off).
void copy_async(CUdeviceptr dst, DeviceContext& dst_device, CUdeviceptr src, DeviceContext& src_device,
                size_t bytes, const Stream& stream);

// Lets kernels on `from` read and write memory of `to` directly; false when the pair cannot
// (copies between them still work, through the host).
bool enable_peer_access(DeviceContext& from, DeviceContext& to);

}  // namespace towerjit::cuda
