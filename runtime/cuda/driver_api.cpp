#include "runtime/cuda/driver_api.h"

#include "jit/knobs.h"

#include <dlfcn.h>

#include <map>
#include <type_traits>

#include "dsl/error.h"

namespace towerjit::cuda {
namespace {

struct Driver {
  DriverApi api;
  int devices = 0;
  std::string reason;  // why no device, or ""
};

// The names of the results towerjit is likely to meet, for when the driver cannot name them
// itself (its stub library answers every call, cuGetErrorName included, with error 34).
const char* known_result_name(CuResult r) {
  static const std::map<CuResult, const char*> names = {
      {0, "CUDA_SUCCESS"},
      {1, "CUDA_ERROR_INVALID_VALUE"},
      {2, "CUDA_ERROR_OUT_OF_MEMORY"},
      {3, "CUDA_ERROR_NOT_INITIALIZED"},
      {4, "CUDA_ERROR_DEINITIALIZED"},
      {34, "CUDA_ERROR_STUB_LIBRARY (the CUDA toolkit's stub libcuda, not a driver)"},
      {35, "CUDA_ERROR_INSUFFICIENT_DRIVER (the driver is older than this CUDA)"},
      {46, "CUDA_ERROR_DEVICE_UNAVAILABLE"},
      {100, "CUDA_ERROR_NO_DEVICE"},
      {101, "CUDA_ERROR_INVALID_DEVICE"},
      {200, "CUDA_ERROR_INVALID_IMAGE"},
      {201, "CUDA_ERROR_INVALID_CONTEXT"},
      {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
      {218, "CUDA_ERROR_INVALID_PTX"},
      {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
      {400, "CUDA_ERROR_INVALID_HANDLE"},
      {500, "CUDA_ERROR_NOT_FOUND"},
      {600, "CUDA_ERROR_NOT_READY"},
      {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
      {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
      {719, "CUDA_ERROR_LAUNCH_FAILED"},
      {801, "CUDA_ERROR_NOT_SUPPORTED"},
      {802, "CUDA_ERROR_SYSTEM_NOT_READY"},
      {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
      {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"},
      {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
      {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
      {907, "CUDA_ERROR_CAPTURED_EVENT"},
      {999, "CUDA_ERROR_UNKNOWN"},
  };
  auto it = names.find(r);
  return it == names.end() ? nullptr : it->second;
}

std::string result_text(const DriverApi& api, CuResult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.GetErrorName && api.GetErrorName(r, &name) != kCudaSuccess) name = nullptr;
  if (api.GetErrorString && api.GetErrorString(r, &text) != kCudaSuccess) text = nullptr;
  std::string out = name ? name : known_result_name(r) ? known_result_name(r) : "CUresult " + std::to_string(r);
  if (text) out += std::string(" (") + text + ")";
  return out;
}

// Binds every entry point; false (with `missing` named) when the library lacks one.
bool bind_all(void* handle, DriverApi& api, std::string& missing) {
  auto bind = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, symbol));
    if (!fn && missing.empty()) missing = symbol;
  };
#define TOWERJIT_CUDA_BIND(member, name, symbol, signature) bind(api.member, #symbol);
  TOWERJIT_CUDA_DRIVER_FUNCTIONS(TOWERJIT_CUDA_BIND)
#undef TOWERJIT_CUDA_BIND
  // The graph entry points: all or none.
  std::string no_graphs;
  auto bind_graph = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, symbol));
    if (!fn) no_graphs = symbol;
  };
#define TOWERJIT_CUDA_BIND_GRAPH(member, name, symbol, signature) bind_graph(api.member, #symbol);
  TOWERJIT_CUDA_GRAPH_FUNCTIONS(TOWERJIT_CUDA_BIND_GRAPH)
#undef TOWERJIT_CUDA_BIND_GRAPH
  if (!no_graphs.empty()) {
#define TOWERJIT_CUDA_UNBIND(member, name, symbol, signature) api.member = nullptr;
    TOWERJIT_CUDA_GRAPH_FUNCTIONS(TOWERJIT_CUDA_UNBIND)
#undef TOWERJIT_CUDA_UNBIND
  }
  api.EventElapsedTime = reinterpret_cast<decltype(api.EventElapsedTime)>(::dlsym(handle, "cuEventElapsedTime_v2"));
  if (!api.EventElapsedTime) bind(api.EventElapsedTime, "cuEventElapsedTime");
  return missing.empty();
}

Driver load() {
  Driver d;
  // Only the driver's own soname: the toolkit's stubs/libcuda.so is a link-time stand-in
  // that fails every call, and loading it by another name would only hide a missing driver.
  // TOWERJIT_CUDA=emulator loads the emulated GPU's library instead (emulator/).
  const bool emulated = knobs::cuda_emulated();
  const std::string library = emulated ? knobs::emulator_library() : "libcuda.so.1";
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    d.reason = (emulated ? "the emulated GPU's library " + library + " (TOWERJIT_CUDA=emulator) was not found ("
                         : std::string("the NVIDIA driver library libcuda.so.1 was not found (")) +
               (why ? why : "dlopen failed") + ")";
    return d;
  }
  d.api.library = library;
  std::string missing;
  if (!bind_all(handle, d.api, missing)) {
    d.reason = library + " lacks " + missing + "; the driver is older than towerjit needs (CUDA 12 or newer)";
    d.api = DriverApi{};
    return d;
  }
  const CuResult r = d.api.Init(0);
  if (r != kCudaSuccess) {
    d.reason = "cuInit failed: " + result_text(d.api, r);
    return d;
  }
  d.api.DriverGetVersion(&d.api.driver_version);
  int count = 0;
  const CuResult c = d.api.DeviceGetCount(&count);
  if (c != kCudaSuccess) {
    d.reason = "cuDeviceGetCount failed: " + result_text(d.api, c);
    return d;
  }
  d.devices = count;
  if (count == 0) d.reason = "the driver reports no CUDA device";
  return d;
}

const Driver& driver() {
  static const Driver d = load();  // thread-safe, once
  return d;
}

}  // namespace

bool cuda_available() { return cuda_device_count() > 0; }

int cuda_device_count() {
  try {
    return driver().devices;
  } catch (...) {  // never: load() does not throw, but a count must not either
    return 0;
  }
}

std::string cuda_unavailable_reason() { return driver().reason; }

const DriverApi& require_driver(std::source_location loc) {
  const Driver& d = driver();
  user_check(d.devices > 0, loc)
      << "no CUDA device: " << d.reason
      << "; run on a machine with an NVIDIA GPU and its driver, or use the CPU backend (CpuProgram, cpu towers)";
  return d.api;
}

std::string cuda_result_text(CuResult result) { return result_text(driver().api, result); }

void check_cuda(CuResult result, const char* call, const std::string& context, std::source_location loc) {
  if (result == kCudaSuccess) return;
  user_check(false, loc) << "CUDA driver call " << call << " failed: " << cuda_result_text(result) << context;
}

}  // namespace towerjit::cuda
