// The emulated GPUs' state, shared by the driver API (cuda_driver.cpp) and the cuBLAS and
// NCCL stand-ins: the devices (TOWERJIT_EMULATED_GPUS, read once), their memory, streams and
// sticky errors; page-locked host memory; the images the emulator's NVRTC makes; the driver's
// error names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "emulator/driver/device_memory.h"
#include "emulator/driver/work_queue.h"

// The driver's handle types, as cuda.h spells them.
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;

namespace towerjit::emulator {

class Device {
 public:
  Device(int index, std::size_t memory_bytes);
  ~Device();

  int index() const { return index_; }
  DeviceMemory& memory() { return *memory_; }
  StickyError& errors() { return *errors_; }
  Stream& null_stream() { return *null_stream_; }
  Stream& create_stream();
  void destroy_stream(Stream* s);
  bool owns(const Stream* s);
  // Waits for every stream the device created.
  void synchronize_streams();
  // Every stream of the device recording into `capture` stops recording (cuStreamEndCapture).
  void end_capture(const std::shared_ptr<Capture>& capture);
  // False when peer access to `peer` was already enabled.
  bool enable_peer(int peer);
  // cuDevicePrimaryCtxReset: waits for the work, frees every allocation, clears the error.
  void reset();

 private:
  int index_;
  std::size_t memory_bytes_;
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<StickyError> errors_;
  int streams_made_ = 0;  // numbers the streams for the random schedule
  std::unique_ptr<Stream> null_stream_;
  std::mutex mutex_;
  std::set<Stream*> streams_;
  std::set<int> peers_;
};

// Every emulated device, created on first use from TOWERJIT_EMULATED_GPUS (default 1) and
// TOWERJIT_EMULATED_GPU_MB (default 4096).
std::vector<std::unique_ptr<Device>>& devices();
Device& device_owning(Stream& s);
// The calling thread's current device (cuCtxSetCurrent), device 0 until it sets one.
Device& current_device();
void set_current_device(int index);
// The stream a handle names: stream 0 is the current device's null stream, whose work first
// waits (on the host) for the device's other streams. Of CUDA's legacy default stream this
// leaves out that a blocking stream's later work waits for the null stream's: towerjit creates
// only non-blocking streams, which CUDA does not order against the null stream either.
Stream& stream_of(CUstream s);
PinnedHostMemory& pinned_memory();
// Whether [address, address + bytes) lies in one allocation of any emulated device.
bool device_range(std::uintptr_t address, std::size_t bytes);

// What the emulator's NVRTC returns as a "cubin": a marker, the module's name and its CUDA
// source, which cuModuleLoadData compiles for the host.
struct ModuleImage {
  std::string name, source;
};
std::string make_module_image(const std::string& name, const std::string& source);
std::optional<ModuleImage> parse_module_image(const char* image);

// cuDeviceGetAttribute's answer: compute capability 9.0, TOWERJIT_EMULATED_GPU_SMS SMs (4 unless
// set: a cost model sets its GPU's count, so grids are capped as on that GPU), CUDA's limits.
int device_attribute(int attribute);

// The driver's name and description of a result; for the emulator's faults the description is
// the last fault's message (kernel, block, thread, line).
const char* error_name(int code);
const char* error_text(int code);
void set_last_message(int code, const std::string& message);
std::string bad_range(const char* call, std::uintptr_t address, std::size_t bytes);
std::string to_hex(std::uintptr_t v);

}  // namespace towerjit::emulator
