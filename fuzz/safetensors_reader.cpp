// Fuzz target: the safetensors reader (runtime/interop/safetensors_format.cpp, json_subset.cpp),
// on a file's bytes as load_safetensors reads them. Any input either decodes or raises
// towerjit::Error. What decodes must hold as many values as each shape says, and survive a
// round trip: encoded again and decoded, the same tensors and metadata.
#include "fuzz_util.h"
#include "runtime/interop/safetensors_format.h"

namespace {

namespace fz = towerjit::fuzz;

bool same(const towerjit::SafetensorsFile& a, const towerjit::SafetensorsFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (const auto& [name, t] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end() || !(it->second.shape == t.shape) || it->second.dtype != t.dtype) return false;
    if (it->second.i32 != t.i32) return false;
    // Bits, not values: a NaN payload must survive as it is. (memcmp of an empty vector's null
    // data is undefined, whatever the size.)
    if (it->second.f32.size() != t.f32.size() ||
        (!t.f32.empty() && std::memcmp(it->second.f32.data(), t.f32.data(), t.f32.size() * 4) != 0))
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto loc = std::source_location::current();
  try {
    const towerjit::SafetensorsFile file = towerjit::decode_safetensors(bytes, "fuzz.safetensors", loc);
    for (const auto& [name, t] : file.tensors) {
      const size_t held = t.dtype == towerjit::DType::f32 ? t.f32.size() : t.i32.size();
      if (held != static_cast<size_t>(t.size())) fz::finding("tensor \"" + name + "\": the values do not fill the shape");
    }
    const std::string again = towerjit::encode_safetensors(file, loc);
    if (!same(file, towerjit::decode_safetensors(again, "re-encoded", loc))) fz::finding("the round trip differs");
  } catch (const towerjit::Error& e) {
    fz::expect_user_error(e);
  }
  return 0;
}
