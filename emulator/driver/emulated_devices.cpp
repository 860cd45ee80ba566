#include "emulator/driver/emulated_devices.h"

#include <cstdio>
#include <cstring>
#include <sstream>

#include "jit/knobs.h"

namespace towerjit::emulator {
namespace {

constexpr const char* kImageMarker = "//towerjit-emulated-module ";

std::mutex& message_mutex() {
  static std::mutex m;
  return m;
}
// The last refusal reported with a message (report() in cuda_driver.cpp), and its code.
std::string& last_message() {
  static std::string m;
  return m;
}
int last_code = 0;

}  // namespace

namespace {
// The seed of a device's n-th stream under the random schedule.
std::optional<unsigned long long> stream_delays(int device, int n) {
  const auto seed = knobs::emulator_random_schedule();
  if (!seed) return std::nullopt;
  return *seed * 1000003ull + static_cast<unsigned long long>(device) * 1009ull + static_cast<unsigned long long>(n);
}
}  // namespace

Device::Device(int index, std::size_t memory_bytes)
    : index_(index),
      memory_bytes_(memory_bytes),
      memory_(std::make_unique<DeviceMemory>(memory_bytes)),
      errors_(std::make_unique<StickyError>()),
      null_stream_(std::make_unique<Stream>(*errors_, stream_delays(index, 0))) {}

Device::~Device() {
  for (Stream* s : streams_) delete s;
}

Stream& Device::create_stream() {
  std::lock_guard lock(mutex_);
  auto* s = new Stream(*errors_, stream_delays(index_, ++streams_made_));
  streams_.insert(s);
  return *s;
}

void Device::reset() {
  synchronize_streams();
  null_stream_->synchronize();
  memory_ = std::make_unique<DeviceMemory>(memory_bytes_);
  errors_->clear();
}

void Device::destroy_stream(Stream* s) {
  {
    std::lock_guard lock(mutex_);
    streams_.erase(s);
  }
  delete s;  // finishes its work first, as cuStreamDestroy lets it
}

bool Device::owns(const Stream* s) {
  std::lock_guard lock(mutex_);
  return streams_.count(const_cast<Stream*>(s)) || s == null_stream_.get();
}

void Device::synchronize_streams() {
  std::vector<Stream*> all;
  {
    std::lock_guard lock(mutex_);
    all.assign(streams_.begin(), streams_.end());
  }
  for (Stream* s : all) s->synchronize();
}

void Device::end_capture(const std::shared_ptr<Capture>& capture) {
  std::vector<Stream*> all;
  {
    std::lock_guard lock(mutex_);
    all.assign(streams_.begin(), streams_.end());
  }
  for (Stream* s : all)
    if (s->capture() == capture) s->set_capture(nullptr);
}

bool Device::enable_peer(int peer) {
  std::lock_guard lock(mutex_);
  return peers_.insert(peer).second;
}

std::vector<std::unique_ptr<Device>>& devices() {
  static std::vector<std::unique_ptr<Device>> all = [] {
    std::vector<std::unique_ptr<Device>> d;
    const std::size_t bytes = static_cast<std::size_t>(knobs::emulated_gpu_mb()) << 20;
    for (int i = 0; i < knobs::emulated_gpus(); ++i) d.push_back(std::make_unique<Device>(i, bytes));
    return d;
  }();
  return all;
}

Device& device_owning(Stream& s) {
  for (auto& d : devices())
    if (d->owns(&s)) return *d;
  return *devices().front();
}

namespace {
thread_local int current = 0;
}  // namespace

Device& current_device() { return *devices().at(static_cast<std::size_t>(current)); }
void set_current_device(int index) { current = index; }

Stream& stream_of(CUstream s) {
  if (s) return *reinterpret_cast<Stream*>(s);
  Device& d = current_device();
  d.synchronize_streams();
  return d.null_stream();
}

PinnedHostMemory& pinned_memory() {
  static PinnedHostMemory p;
  return p;
}

bool device_range(std::uintptr_t address, std::size_t bytes) {
  for (auto& d : devices())
    if (d->memory().contains(address, bytes)) return true;
  return false;
}

std::string make_module_image(const std::string& name, const std::string& source) {
  return kImageMarker + name + "\n" + source;
}

std::optional<ModuleImage> parse_module_image(const char* image) {
  const std::size_t marker = std::strlen(kImageMarker);
  if (std::strncmp(image, kImageMarker, marker) != 0) return std::nullopt;
  const char* newline = std::strchr(image + marker, '\n');
  if (!newline) return std::nullopt;
  return ModuleImage{std::string(image + marker, newline), std::string(newline + 1)};
}

int device_attribute(int attribute) {
  switch (attribute) {
    case 1: return 1024;        // MAX_THREADS_PER_BLOCK
    case 2: case 3: case 4: return attribute == 4 ? 64 : 1024;  // MAX_BLOCK_DIM_X, Y, Z
    case 5: return 2147483647;  // MAX_GRID_DIM_X
    case 6: case 7: return 65535;
    case 8: return 48 * 1024;   // MAX_SHARED_MEMORY_PER_BLOCK
    case 10: return 32;         // WARP_SIZE
    case 16: return knobs::emulated_gpu_sms();  // MULTIPROCESSOR_COUNT
    case 75: return 9;          // COMPUTE_CAPABILITY_MAJOR
    case 76: return 0;          // COMPUTE_CAPABILITY_MINOR
    default: return 0;
  }
}

const char* error_name(int code) {
  switch (code) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 200: return "CUDA_ERROR_INVALID_IMAGE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 600: return "CUDA_ERROR_NOT_READY";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 704: return "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED";
    case 716: return "CUDA_ERROR_MISALIGNED_ADDRESS";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 900: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case 901: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    case 902: return "CUDA_ERROR_STREAM_CAPTURE_MERGE";
    case 903: return "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED";
    case 904: return "CUDA_ERROR_STREAM_CAPTURE_UNJOINED";
    case 905: return "CUDA_ERROR_STREAM_CAPTURE_ISOLATION";
    case 907: return "CUDA_ERROR_CAPTURED_EVENT";
    default: return "CUDA_ERROR_UNKNOWN";
  }
}

const char* error_text(int code) {
  if (code == 0) return "no error";
  // The emulator's own faults and refusals carry their message; a real driver says less.
  std::lock_guard lock(message_mutex());
  for (auto& d : devices())
    if (d->errors().code() == code) {
      thread_local std::string text;
      text = d->errors().message();
      return text.c_str();
    }
  if (code == last_code && !last_message().empty()) {
    thread_local std::string text;
    text = last_message();
    return text.c_str();
  }
  return error_name(code);
}

void set_last_message(int code, const std::string& message) {
  std::lock_guard lock(message_mutex());
  last_code = code;
  last_message() = message;
}

std::string to_hex(std::uintptr_t v) {
  std::ostringstream s;
  s << std::hex << v;
  return s.str();
}

std::string bad_range(const char* call, std::uintptr_t address, std::size_t bytes) {
  return std::string("emulated GPU: ") + call + ": [0x" + to_hex(address) + ", +" + std::to_string(bytes) +
         ") is not inside one device allocation";
}

}  // namespace towerjit::emulator
