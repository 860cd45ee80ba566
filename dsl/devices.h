// Devices a tower can run on: `cpu(i)` is a logical CPU worker (a pinned thread with its own
// arena), `gpu(i)` the i-th CUDA device. Only the declaration lives here; running towers is
// the runtime's job.
#pragma once

#include <compare>
#include <source_location>
#include <string>
#include <vector>

namespace towerjit {

using Loc = std::source_location;

enum class DeviceKind { cpu, gpu };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  // "cpu:0", "gpu:1": the form parse_device() reads back.
  std::string str() const;
  auto operator<=>(const Device&) const = default;
};

// Errors: a negative index.
Device cpu(int index = 0, Loc loc = Loc::current());
Device gpu(int index = 0, Loc loc = Loc::current());

// "cpu:N" or "gpu:N" (N a non-negative decimal; spaces around it are ignored). Errors name the
// string and list the valid forms, with a hint for TensorFlow ("/gpu:0") and PyTorch
// ("cuda:0") spellings.
Device parse_device(const std::string& text, Loc loc = Loc::current());
// A comma-separated list, e.g. "cpu:0,cpu:1" or "gpu:0, gpu:1"; duplicates are kept (several
// towers on one device). Errors: an empty list or entry, or any entry parse_device rejects.
std::vector<Device> parse_devices(const std::string& text, Loc loc = Loc::current());

// "cpu:0,cpu:1".
std::string str(const std::vector<Device>& devices);

}  // namespace towerjit
