// The CUDA driver API of the emulated GPU: the entry points towerjit's runtime binds
// (runtime/cuda/driver_api.h), with the driver's semantics. Devices are TOWERJIT_EMULATED_GPUS
// of them, compute capability 9.0, TOWERJIT_EMULATED_GPU_SMS SMs (4), TOWERJIT_EMULATED_GPU_MB of memory; modules are the
// images the emulator's NVRTC (nvrtc.cpp) returns, compiled for the host; launches run on their
// stream's host thread (work_queue.h) through the block scheduler; a fault becomes the device's
// sticky error, reported with the kernel, block, thread and line by every later call.
//
// Stream capture follows CUDA's rules (work_queue.h records the work): a call that would wait
// for a capturing stream (cuStreamSynchronize on it, cuCtxSynchronize on its device, a copy
// to or from pageable memory on it), or an unsafe call from the capturing thread (cuMemAlloc,
// cuMemFree), fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture,
// whose cuStreamEndCapture then fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED; querying or
// synchronising an event last recorded in a capture fails with CUDA_ERROR_CAPTURED_EVENT;
// waiting inside a capture on an event recorded outside it fails with
// CUDA_ERROR_STREAM_CAPTURE_ISOLATION. A graph launch queues the recorded work, in order, on
// the stream it is launched on.
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "emulator/driver/emulated_devices.h"
#include "emulator/driver/launch_log.h"
#include "emulator/driver/library_kernel_costs.h"
#include "emulator/kernel/host_module.h"

namespace towerjit::emulator {
namespace {

constexpr int kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kInvalidDevice = 101, kInvalidImage = 200,
              kInvalidContext = 201, kInvalidHandle = 400, kNotFound = 500, kNotReady = 600,
              kPeerAlreadyEnabled = 704, kCaptureUnsupported = 900, kCaptureInvalidated = 901,
              kCaptureMerge = 902, kCaptureUnmatched = 903, kCaptureIsolation = 905, kCapturedEvent = 907;
constexpr int kCaptureModeGlobal = 0, kCaptureModeRelaxed = 2;

// A captured graph (cuStreamEndCapture) and an instantiated one (cuGraphInstantiate): the
// recorded work, shared, as every closure already holds its own copy of its arguments.
struct Graph {
  std::shared_ptr<const std::vector<std::function<std::function<void()>()>>> work;
};
struct GraphExec {
  std::shared_ptr<const std::vector<std::function<std::function<void()>()>>> work;
};

// The captures under way, for the calls that are unsafe during any of them.
std::mutex captures_mutex;
std::set<std::shared_ptr<Capture>> active_captures;

struct Module;

struct Function {
  Module* module;
  std::string name;
  const HostModule::Kernel* kernel;
};

struct Module {
  std::shared_ptr<HostModule> host;
  // Handed out by cuModuleGetFunction, which CUDA lets any thread call at any time: towers
  // sharing a GPU look up the library module's kernels at once.
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<Function>> functions;
};

Device* device_of_context(CUcontext c) {
  const auto index = reinterpret_cast<std::uintptr_t>(c) - 1;
  auto& all = devices();
  return index < all.size() ? all[index].get() : nullptr;
}

// The device whose sticky error a call on stream `s` reports.
int sticky(CUstream s) {
  Device* d = s ? &device_owning(*reinterpret_cast<Stream*>(s)) : &current_device();
  return d->errors().code();
}

int report(int code, const std::string& what) {
  set_last_message(code, what);
  return code;
}

// A copy's launch record (emulator/driver/launch_log.h): `bytes` read and as many written.
void record_copy(const char* name, Stream& stream, std::size_t bytes, bool host_link) {
  if (!launch_log_enabled()) return;
  record_launch({.name = name, .kind = LaunchKind::copy, .stream = &stream, .device = device_owning(stream).index(),
                 .bytes = 2.0 * static_cast<double>(bytes), .host_link = host_link});
}

// `call`, made on (or for) a capture it is not permitted in: the capture is invalidated and
// the call fails.
int break_capture(Capture& c, const char* call) {
  {
    std::lock_guard lock(c.mutex);
    if (!c.invalidated_by) c.invalidated_by = kCaptureUnsupported, c.broken_by = call;
  }
  return report(kCaptureUnsupported, std::string("emulated GPU: ") + call +
                                         " is not permitted while a stream captures a CUDA graph (it would wait for "
                                         "work that is recorded, not run)");
}

// A call that waits for stream `s`'s work: not while it captures.
int refuse_if_capturing(Stream& s, const char* call) {
  if (auto c = s.capture()) return break_capture(*c, call);
  return kSuccess;
}

// A call unsafe during capture (it synchronises the device, or allocates or frees memory the
// graph cannot see): refused on the capturing thread, and on any thread during a global-mode
// capture; `device` (when given) refuses it during any capture on that device.
int refuse_if_unsafe(const char* call, Device* device = nullptr) {
  std::shared_ptr<Capture> hit;
  {
    std::lock_guard lock(captures_mutex);
    for (const auto& c : active_captures) {
      const bool same_thread = c->thread == std::this_thread::get_id() && c->mode != kCaptureModeRelaxed;
      const bool on_device = device && &device_owning(*static_cast<Stream*>(c->origin)) == device;
      if (same_thread || c->mode == kCaptureModeGlobal || on_device) hit = c;
    }
  }
  return hit ? break_capture(*hit, call) : kSuccess;
}

}  // namespace
}  // namespace towerjit::emulator

using namespace towerjit::emulator;

extern "C" {

int cuInit(unsigned) { return devices().empty() ? kInvalidDevice : kSuccess; }

int cuDriverGetVersion(int* v) {
  *v = 13000;
  return kSuccess;
}

int cuGetErrorName(int code, const char** name) {
  *name = error_name(code);
  return kSuccess;
}

int cuGetErrorString(int code, const char** text) {
  *text = error_text(code);
  return kSuccess;
}

int cuDeviceGetCount(int* n) {
  *n = static_cast<int>(devices().size());
  return kSuccess;
}

int cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= static_cast<int>(devices().size())) return kInvalidDevice;
  *d = ordinal;
  return kSuccess;
}

int cuDeviceGetName(char* name, int length, CUdevice d) {
  if (d < 0 || d >= static_cast<int>(devices().size())) return kInvalidDevice;
  const std::string n = "towerjit emulated GPU (CUDA C on the CPU)";  // one model, as two H200s are
  std::snprintf(name, static_cast<std::size_t>(length), "%s", n.c_str());
  return kSuccess;
}

int cuDeviceGetAttribute(int* value, int attribute, CUdevice d) {
  if (d < 0 || d >= static_cast<int>(devices().size())) return kInvalidDevice;
  *value = device_attribute(attribute);
  return kSuccess;
}

int cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice d) {
  if (d < 0 || d >= static_cast<int>(devices().size())) return kInvalidDevice;
  *bytes = devices()[d]->memory().limit();
  return kSuccess;
}

int cuDeviceCanAccessPeer(int* can, CUdevice a, CUdevice b) {
  *can = a != b;
  return kSuccess;
}

int cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  if (d < 0 || d >= static_cast<int>(devices().size())) return kInvalidDevice;
  *c = reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(d) + 1);
  return kSuccess;
}

// As CUDA: the primary context's memory is freed and its sticky error cleared, so a process
// goes on after a fault (the emulator's self-tests do).
int cuDevicePrimaryCtxReset_v2(CUdevice d) {
  if (d < 0 || d >= static_cast<int>(devices().size())) return kInvalidDevice;
  devices()[d]->reset();
  return kSuccess;
}

int cuCtxSetCurrent(CUcontext c) {
  if (!device_of_context(c)) return kInvalidContext;
  set_current_device(static_cast<int>(reinterpret_cast<std::uintptr_t>(c) - 1));
  return kSuccess;
}

int cuCtxSynchronize() {
  Device& d = current_device();
  if (int e = refuse_if_unsafe("cuCtxSynchronize", &d)) return e;
  d.synchronize_streams();
  d.null_stream().synchronize();
  return d.errors().code();
}

int cuCtxEnablePeerAccess(CUcontext peer, unsigned) {
  Device* p = device_of_context(peer);
  if (!p) return kInvalidContext;
  return current_device().enable_peer(p->index()) ? kSuccess : kPeerAlreadyEnabled;
}

int cuMemGetInfo_v2(std::size_t* free, std::size_t* total) {
  DeviceMemory& m = current_device().memory();
  *total = m.limit();
  *free = m.limit() - m.used();
  return kSuccess;
}

int cuMemAlloc_v2(CUdeviceptr* p, std::size_t bytes) {
  if (bytes == 0) return kInvalidValue;
  if (int e = refuse_if_unsafe("cuMemAlloc")) return e;
  auto address = current_device().memory().allocate(bytes);
  if (!address) return report(kOutOfMemory, "emulated GPU: out of memory allocating " + std::to_string(bytes) + " bytes");
  *p = *address;
  return kSuccess;
}

// As CUDA's, the free waits for the device's work first, so no queued kernel reads freed memory.
int cuMemFree_v2(CUdeviceptr p) {
  if (int e = refuse_if_unsafe("cuMemFree")) return e;
  for (auto& d : devices())
    if (d->memory().contains(p, 0)) {
      d->synchronize_streams();
      d->null_stream().synchronize();
      return d->memory().free(p) ? kSuccess : kInvalidValue;
    }
  return kInvalidValue;
}

int cuMemAllocHost_v2(void** p, std::size_t bytes) {
  *p = pinned_memory().allocate(bytes);
  return *p ? kSuccess : kOutOfMemory;
}

int cuMemFreeHost(void* p) { return pinned_memory().free(p) ? kSuccess : kInvalidValue; }

int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream s) {
  if (int e = sticky(s)) return e;
  if (!device_range(dst, bytes)) return report(kInvalidValue, bad_range("cuMemcpyHtoDAsync", dst, bytes));
  auto* to = reinterpret_cast<void*>(dst);
  const bool pinned = pinned_memory().contains(reinterpret_cast<std::uintptr_t>(src), bytes);
  // A graph cannot stage pageable memory at each launch.
  if (!pinned)
    if (int e = refuse_if_capturing(stream_of(s), "cuMemcpyHtoDAsync from pageable memory")) return e;
  if (pinned) {
    // From page-locked memory the copy runs when the stream reaches it, as on a GPU: a host
    // that overwrites the buffer before then is a bug this shows.
    Stream& stream = stream_of(s);
    stream.enqueue([to, src, bytes, &stream] {
      std::memcpy(to, src, bytes);
      record_copy("cuMemcpyHtoDAsync", stream, bytes, true);
    });
  } else {
    // From pageable memory the driver stages the bytes before the call returns.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    Stream& stream = stream_of(s);
    stream.enqueue([to, staged, &stream] {
      std::memcpy(to, staged->data(), staged->size());
      record_copy("cuMemcpyHtoDAsync", stream, staged->size(), true);
    });
  }
  return kSuccess;
}

int cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, std::size_t bytes, CUstream s) {
  if (int e = sticky(s)) return e;
  if (!device_range(src, bytes)) return report(kInvalidValue, bad_range("cuMemcpyDtoHAsync", src, bytes));
  const auto* from = reinterpret_cast<const void*>(src);
  Stream& stream = stream_of(s);
  const bool pinned = pinned_memory().contains(reinterpret_cast<std::uintptr_t>(dst), bytes);
  if (!pinned || !s)
    if (int e = refuse_if_capturing(stream, "cuMemcpyDtoHAsync into pageable memory")) return e;
  stream.enqueue([dst, from, bytes, &stream] {
    std::memcpy(dst, from, bytes);
    record_copy("cuMemcpyDtoHAsync", stream, bytes, true);
  });
  // Into pageable memory the call returns once the copy is done.
  if (!pinned || !s) stream.synchronize();
  return sticky(s);
}

int cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream s) {
  if (int e = sticky(s)) return e;
  if (!device_range(dst, bytes) || !device_range(src, bytes))
    return report(kInvalidValue, bad_range("cuMemcpyDtoDAsync", device_range(dst, bytes) ? src : dst, bytes));
  Stream& stream = stream_of(s);
  stream.enqueue([dst, src, bytes, &stream] {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
    record_copy("cuMemcpyDtoDAsync", stream, bytes, false);
  });
  return kSuccess;
}

int cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, std::size_t bytes, CUstream s) {
  return cuMemcpyDtoDAsync_v2(dst, src, bytes, s);
}

int cuMemsetD32Async(CUdeviceptr dst, unsigned value, std::size_t count, CUstream s) {
  if (int e = sticky(s)) return e;
  if (!device_range(dst, count * 4)) return report(kInvalidValue, bad_range("cuMemsetD32Async", dst, count * 4));
  Stream& stream = stream_of(s);
  stream.enqueue([dst, value, count, &stream] {
    auto* p = reinterpret_cast<unsigned*>(dst);
    for (std::size_t i = 0; i < count; ++i) p[i] = value;
    if (launch_log_enabled())  // a fill writes and reads nothing
      record_launch({.name = "cuMemsetD32Async", .kind = LaunchKind::copy, .stream = &stream,
                     .device = device_owning(stream).index(), .bytes = 4.0 * static_cast<double>(count)});
  });
  return kSuccess;
}

int cuMemsetD8Async(CUdeviceptr dst, unsigned char value, std::size_t count, CUstream s) {
  if (int e = sticky(s)) return e;
  if (!device_range(dst, count)) return report(kInvalidValue, bad_range("cuMemsetD8Async", dst, count));
  Stream& stream = stream_of(s);
  stream.enqueue([dst, value, count, &stream] {
    std::memset(reinterpret_cast<void*>(dst), value, count);
    if (launch_log_enabled())
      record_launch({.name = "cuMemsetD8Async", .kind = LaunchKind::copy, .stream = &stream,
                     .device = device_owning(stream).index(), .bytes = static_cast<double>(count)});
  });
  return kSuccess;
}

int cuStreamCreate(CUstream* s, unsigned) {
  *s = reinterpret_cast<CUstream>(&current_device().create_stream());
  return kSuccess;
}

int cuStreamDestroy_v2(CUstream s) {
  if (!s) return kInvalidHandle;
  device_owning(*reinterpret_cast<Stream*>(s)).destroy_stream(reinterpret_cast<Stream*>(s));
  return kSuccess;
}

int cuStreamSynchronize(CUstream s) {
  if (int e = refuse_if_capturing(stream_of(s), "cuStreamSynchronize")) return e;
  stream_of(s).synchronize();
  return sticky(s);
}

// Inside a capture, a wait on an event of the same capture orders nothing more (the recorded
// work is already in order); a stream outside any capture that waits on such an event joins
// the capture; a capturing stream may not wait on an event recorded outside its capture.
int cuStreamWaitEvent(CUstream s, CUevent e, unsigned) {
  if (!e) return kInvalidHandle;
  auto* event = reinterpret_cast<Event*>(e);
  Stream& stream = stream_of(s);
  const std::shared_ptr<Capture> mine = stream.capture(), theirs = event->captured_in;
  if (theirs && mine == theirs) return kSuccess;
  if (theirs && !mine) {
    bool active;
    {
      std::lock_guard lock(captures_mutex);
      active = active_captures.count(theirs) > 0;
    }
    if (active) {
      stream.set_capture(theirs);
      return kSuccess;
    }
    return report(kCapturedEvent, "emulated GPU: cuStreamWaitEvent on an event recorded in a capture that has ended");
  }
  if (mine && theirs) return report(kCaptureMerge, "emulated GPU: cuStreamWaitEvent would merge two captures");
  if (mine)
    return break_capture(*mine, "cuStreamWaitEvent on an event recorded outside the capture"), kCaptureIsolation;
  event->wait_on(stream);
  return kSuccess;
}

int cuEventCreate(CUevent* e, unsigned) {
  *e = reinterpret_cast<CUevent>(new Event());
  return kSuccess;
}

int cuEventDestroy_v2(CUevent e) {
  delete reinterpret_cast<Event*>(e);
  return kSuccess;
}

int cuEventRecord(CUevent e, CUstream s) {
  if (!e) return kInvalidHandle;
  auto* event = reinterpret_cast<Event*>(e);
  Stream& stream = stream_of(s);
  event->captured_in = stream.capture();  // a point of the graph, not of the stream
  if (!event->captured_in) event->record(stream);
  return kSuccess;
}

int cuEventQuery(CUevent e) {
  auto* event = reinterpret_cast<Event*>(e);
  if (event->captured_in) return report(kCapturedEvent, "emulated GPU: cuEventQuery on an event recorded in a capture");
  return event->reached() ? kSuccess : kNotReady;
}

int cuEventSynchronize(CUevent e) {
  auto* event = reinterpret_cast<Event*>(e);
  if (event->captured_in)
    return report(kCapturedEvent, "emulated GPU: cuEventSynchronize on an event recorded in a capture");
  event->synchronize();
  return current_device().errors().code();
}

int cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  *ms = Event::elapsed_ms(*reinterpret_cast<Event*>(start), *reinterpret_cast<Event*>(end));
  return kSuccess;
}

int cuModuleLoadData(CUmodule* m, const void* image) {
  const std::optional<ModuleImage> parsed = parse_module_image(static_cast<const char*>(image));
  if (!parsed)
    return report(kInvalidImage, "emulated GPU: cuModuleLoadData was given an image its NVRTC did not make "
                                 "(a real cubin or PTX); compile with TOWERJIT_CUDA=emulator set");
  try {
    *m = reinterpret_cast<CUmodule>(
        new Module{HostModule::compile(parsed->source, parsed->name), {}, {}});
  } catch (const Fault& f) {
    return report(kInvalidImage, f.what());
  }
  return kSuccess;
}

int cuModuleUnload(CUmodule m) {
  delete reinterpret_cast<Module*>(m);
  return kSuccess;
}

int cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  auto* module = reinterpret_cast<Module*>(m);
  const HostModule::Kernel* k = module->host->kernel(name);
  if (!k) return kNotFound;
  std::lock_guard lock(module->mutex);
  auto& function = module->functions[name];
  if (!function) function = std::make_unique<Function>(Function{module, name, k});
  *f = reinterpret_cast<CUfunction>(function.get());
  return kSuccess;
}

int cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared_bytes, CUstream s, void** params, void** extra) {
  if (int e = sticky(s)) return e;
  auto* fn = reinterpret_cast<Function*>(f);
  if (extra) return report(kInvalidValue, "emulated GPU: cuLaunchKernel's `extra` parameters are not supported");
  LaunchShape shape;
  shape.grid = {gx, gy, gz};
  shape.block = {bx, by, bz};
  shape.dynamic_shared_bytes = shared_bytes;
  // The driver copies the parameters at the call; the kernel sees those bytes.
  auto bytes = std::make_shared<std::vector<std::vector<char>>>();
  for (const HostModule::Param& p : fn->kernel->params) {
    const char* from = static_cast<const char*>(params[bytes->size()]);
    bytes->emplace_back(from, from + p.bytes);
  }
  std::string bad_pointer;
  for (std::size_t i = 0; i < fn->kernel->params.size(); ++i) {
    if (!fn->kernel->params[i].pointer) continue;
    std::uintptr_t address;
    std::memcpy(&address, (*bytes)[i].data(), sizeof address);
    if (address && !device_range(address, 0) && !pinned_memory().contains(address, 0))
      bad_pointer = "parameter " + std::to_string(i) + " of kernel " + fn->name + " is 0x" + to_hex(address) +
                    ", which is neither device memory nor page-locked host memory";
  }
  Device& device = s ? device_owning(*reinterpret_cast<Stream*>(s)) : current_device();
  Stream& stream = stream_of(s);
  stream.enqueue([fn, shape, bytes, bad_pointer, &device, &stream] {
    if (!bad_pointer.empty()) throw Fault("emulated GPU: " + bad_pointer, Fault::kIllegalAddress);
    std::vector<void*> argv;
    for (auto& b : *bytes) argv.push_back(b.data());
    LaunchShape ordered = shape;
    ordered.block_order_seed = stream.block_order_seed();
    const GridStats stats = run_grid(fn->name, fn->kernel->entry, argv.data(), ordered);
    const std::string damaged = device.memory().damaged_guards();
    if (!damaged.empty())
      throw Fault("emulated GPU: kernel " + fn->name + " wrote outside its allocations: " + damaged,
                  Fault::kIllegalAddress);
    if (launch_log_enabled()) {
      const KernelCost cost = library_kernel_cost(fn->name, argv.data());
      record_launch({.name = fn->name, .module = fn->module->host->name(), .kind = LaunchKind::kernel,
                     .stream = &stream, .device = device.index(),
                     .grid = {shape.grid.x, shape.grid.y, shape.grid.z},
                     .block = {shape.block.x, shape.block.y, shape.block.z},
                     .static_shared_bytes = stats.static_shared_bytes,
                     .dynamic_shared_bytes = shape.dynamic_shared_bytes, .work_max = stats.work_max,
                     .work_mean = stats.threads ? stats.work_sum / static_cast<double>(stats.threads) : 0,
                     .tail_work_max = stats.tail_work_max, .tail_work_sum = stats.tail_work_sum,
                     .bytes = cost.bytes, .flops = cost.flops});
    }
  });
  return kSuccess;
}

// Capture: the stream records its work (and that of the streams that join it) from now on.
int cuStreamBeginCapture_v2(CUstream s, int mode) {
  if (!s) return report(kCaptureUnsupported, "emulated GPU: the null stream cannot capture");
  if (mode < kCaptureModeGlobal || mode > kCaptureModeRelaxed) return kInvalidValue;
  Stream& stream = *reinterpret_cast<Stream*>(s);
  if (stream.capture()) return report(kInvalidValue, "emulated GPU: cuStreamBeginCapture on a stream already capturing");
  auto c = std::make_shared<Capture>();
  c->origin = &stream;
  c->thread = std::this_thread::get_id();
  c->mode = mode;
  {
    std::lock_guard lock(captures_mutex);
    active_captures.insert(c);
  }
  stream.set_capture(c);
  return kSuccess;
}

int cuStreamEndCapture(CUstream s, CUgraph* graph) {
  if (!s) return kCaptureUnmatched;
  Stream& stream = *reinterpret_cast<Stream*>(s);
  const std::shared_ptr<Capture> c = stream.capture();
  if (!c || c->origin != &stream) return report(kCaptureUnmatched, "emulated GPU: cuStreamEndCapture on a stream that did not begin the capture");
  {
    std::lock_guard lock(captures_mutex);
    active_captures.erase(c);
  }
  // Every stream recording into it stops (a joined stream left unjoined is not checked).
  for (auto& d : devices()) d->end_capture(c);
  std::lock_guard lock(c->mutex);
  if (c->invalidated_by) {
    *graph = nullptr;
    return report(kCaptureInvalidated, "emulated GPU: the capture was invalidated by " + c->broken_by);
  }
  *graph = reinterpret_cast<CUgraph>(new Graph{std::make_shared<const std::vector<std::function<std::function<void()>()>>>(std::move(c->work))});
  return kSuccess;
}

int cuStreamIsCapturing(CUstream s, int* status) {
  const std::shared_ptr<Capture> c = stream_of(s).capture();
  *status = !c ? 0 : c->invalidated_by ? 2 : 1;
  return kSuccess;
}

int cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long) {
  if (!graph) return kInvalidValue;
  *exec = reinterpret_cast<CUgraphExec>(new GraphExec{reinterpret_cast<Graph*>(graph)->work});
  return kSuccess;
}

// The recorded work, queued in order on `s` (recorded again when `s` itself captures).
int cuGraphLaunch(CUgraphExec exec, CUstream s) {
  if (!exec) return kInvalidValue;
  if (int e = sticky(s)) return e;
  Stream& stream = stream_of(s);
  // Each node's work runs in a GraphReplayScope, so its launch record says it was replayed.
  for (const auto& make : *reinterpret_cast<GraphExec*>(exec)->work)
    stream.enqueue_made([make]() -> std::function<void()> {
      std::function<void()> work = make();
      return [work] {
        GraphReplayScope replay;
        work();
      };
    });
  return kSuccess;
}

int cuGraphExecDestroy(CUgraphExec exec) {
  delete reinterpret_cast<GraphExec*>(exec);
  return kSuccess;
}

int cuGraphDestroy(CUgraph graph) {
  delete reinterpret_cast<Graph*>(graph);
  return kSuccess;
}

}  // extern "C"
