#include "runtime/interop/safetensors_format.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dsl/error.h"
#include "runtime/interop/json_subset.h"

namespace towerjit {
namespace {

// The reference implementation refuses headers past 100 MB; so do we, before reading them.
constexpr uint64_t kMaxHeader = 100'000'000;

struct ElementType {
  const char* name;
  size_t size;
};
constexpr ElementType kTypes[] = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8},
                                  {"I32", 4}, {"I64", 8}, {"BOOL", 1}, {"U8", 1}};

uint64_t little(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
  else if (exp == 31) v = mant ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

// "an array", "a string": a JSON kind in a sentence.
std::string a_kind(json::Value::Kind kind) {
  const std::string name = json::kind_name(kind);
  return (name[0] == 'a' || name[0] == 'i' || name[0] == 'o' ? "an " : "a ") + name;
}

// One tensor's entry, checked.
struct Entry {
  std::string name;
  const ElementType* type = nullptr;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0, count = 0;
};

class HeaderReader {
 public:
  HeaderReader(const std::string& file, std::source_location loc) : file_(file), loc_(loc) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("towerjit: \"" + file_ + "\" has a damaged safetensors header: " + what +
                "; write the file again (safetensors' save_file, or save_safetensors) (" + where(loc_) + ")");
  }

  Entry entry(const std::string& name, const json::Value& v) const {
    const std::string at = "tensor \"" + name + "\"";
    if (v.kind != json::Value::Kind::object) fail(at + " is " + a_kind(v.kind) + ", not an object");
    for (const std::string& key : v.keys)
      if (key != "dtype" && key != "shape" && key != "data_offsets") fail(at + " has an unknown field \"" + key + "\"");
    const json::Value* dtype = v.find("dtype");
    const json::Value* shape = v.find("shape");
    const json::Value* offsets = v.find("data_offsets");
    if (!dtype || !shape || !offsets) fail(at + " lacks \"dtype\", \"shape\" or \"data_offsets\"");
    Entry e;
    e.name = name;
    if (dtype->kind != json::Value::Kind::string) fail(at + "'s dtype is not a string");
    for (const ElementType& t : kTypes)
      if (dtype->text == t.name) e.type = &t;
    user_check(e.type, loc_) << "\"" << file_ << "\": " << at << " has dtype \"" << dtype->text
                             << "\", which towerjit does not read (it reads F32, F16, BF16, F64, I32, I64, BOOL "
                                "and U8); convert it before saving, e.g. tensor.float()";
    if (shape->kind != json::Value::Kind::array || shape->items.size() > 32)
      fail(at + "'s shape is not an array of at most 32 dimensions");
    e.count = 1;
    uint64_t nonzero = 1;
    for (const json::Value& d : shape->items) {
      if (d.kind != json::Value::Kind::integer) fail(at + "'s shape holds " + a_kind(d.kind));
      e.count = d.integer == 0 ? 0 : e.count > UINT64_MAX / d.integer ? UINT64_MAX : e.count * d.integer;
      if (d.integer) nonzero = nonzero > UINT64_MAX / d.integer ? UINT64_MAX : nonzero * d.integer;
      e.shape.push_back(static_cast<int64_t>(std::min<uint64_t>(d.integer, INT64_MAX)));
    }
    if (nonzero > static_cast<uint64_t>(INT64_MAX) / 8) fail(at + "'s shape has more elements than a tensor can hold");
    if (offsets->kind != json::Value::Kind::array || offsets->items.size() != 2 ||
        offsets->items[0].kind != json::Value::Kind::integer || offsets->items[1].kind != json::Value::Kind::integer)
      fail(at + "'s data_offsets is not [begin, end]");
    e.begin = offsets->items[0].integer, e.end = offsets->items[1].integer;
    if (e.end < e.begin || e.end - e.begin != e.count * e.type->size)
      fail(at + " is " + Shape(e.shape).str() + " " + e.type->name + ", " + std::to_string(e.count * e.type->size) +
           " bytes, but its data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] say otherwise");
    return e;
  }

 private:
  const std::string& file_;
  std::source_location loc_;
};

void convert(const Entry& e, const unsigned char* p, HostTensor& t, const std::string& file, std::source_location loc) {
  const std::string type = e.type->name;
  for (uint64_t i = 0; i < e.count; ++i, p += e.type->size) {
    const uint64_t bits = little(p, e.type->size);
    if (type == "F32") t.f32[i] = std::bit_cast<float>(static_cast<uint32_t>(bits));
    else if (type == "F64") t.f32[i] = static_cast<float>(std::bit_cast<double>(bits));
    else if (type == "F16") t.f32[i] = half_to_float(static_cast<uint16_t>(bits));
    else if (type == "BF16") t.f32[i] = std::bit_cast<float>(static_cast<uint32_t>(bits << 16));
    else if (type == "I32") t.i32[i] = static_cast<int32_t>(static_cast<uint32_t>(bits));
    else if (type == "BOOL") t.i32[i] = bits != 0;
    else if (type == "U8") t.i32[i] = static_cast<int32_t>(bits);
    else {  // I64
      const int64_t v = static_cast<int64_t>(bits);
      user_check(v >= INT32_MIN && v <= INT32_MAX, loc)
          << "\"" << file << "\": tensor \"" << e.name << "\" holds the int64 value " << v << " at element " << i
          << ", outside int32's range, which towerjit stores integers in; save it as int32 or float32";
      t.i32[i] = static_cast<int32_t>(v);
    }
  }
}

}  // namespace

std::string encode_safetensors(const SafetensorsFile& file, std::source_location loc) {
  std::string header = "{";
  if (!file.metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : file.metadata) header += (first ? "" : ",") + json::quote(k) + ":" + json::quote(v), first = false;
    header += "}";
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    user_check(!name.empty() && name != "__metadata__", loc)
        << "a tensor may not be named \"" << name << "\" in a safetensors file; rename it";
    const size_t held = t.dtype == DType::f32 ? t.f32.size() : t.i32.size();
    user_check(held == static_cast<size_t>(t.size()), loc)
        << "tensor \"" << name << "\" is " << t.shape.str() << " but holds " << held << " values; fill it";
    std::string shape;
    for (int i = 0; i < t.shape.rank(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
    const uint64_t bytes = held * 4;
    header += (header.size() > 1 ? "," : "") + json::quote(name) + ":{\"dtype\":\"" +
              (t.dtype == DType::f32 ? "F32" : "I32") + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  out += header;
  out.reserve(out.size() + offset);
  for (const auto& [name, t] : file.tensors) {
    const size_t at = out.size();
    out.resize(at + t.size() * 4);
    for (int64_t i = 0; i < t.size(); ++i) {
      const uint32_t v = t.dtype == DType::f32 ? std::bit_cast<uint32_t>(t.f32[i]) : static_cast<uint32_t>(t.i32[i]);
      for (int b = 0; b < 4; ++b) out[at + 4 * i + b] = static_cast<char>(v >> (8 * b));
    }
  }
  return out;
}

SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& file, std::source_location loc) {
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  user_check(bytes.size() >= 8, loc) << "\"" << file << "\" is " << bytes.size()
                                     << " bytes long, too short for a safetensors file (8 bytes of header length "
                                        "at least); it is truncated or not a safetensors file";
  const uint64_t n = little(u, 8);
  user_check(n <= kMaxHeader && n <= bytes.size() - 8, loc)
      << "\"" << file << "\" claims a header of " << n << " bytes but "
      << (n > kMaxHeader ? "safetensors headers are at most 100 MB" : "holds only " + std::to_string(bytes.size() - 8) + " after its length")
      << "; the file is truncated or not a safetensors file";
  const HeaderReader reader(file, loc);
  json::Value header;
  std::string error;
  if (!json::parse(bytes.substr(8, n), header, error, 4)) reader.fail("its JSON is malformed (" + error + ")");
  if (header.kind != json::Value::Kind::object) reader.fail("it is not a JSON object");

  SafetensorsFile out;
  std::vector<Entry> entries;
  for (size_t i = 0; i < header.keys.size(); ++i) {
    const std::string& name = header.keys[i];
    const json::Value& v = header.values[i];
    if (name != "__metadata__") {
      entries.push_back(reader.entry(name, v));
      continue;
    }
    if (v.kind != json::Value::Kind::object) reader.fail("\"__metadata__\" is not an object");
    for (size_t j = 0; j < v.keys.size(); ++j) {
      if (v.values[j].kind != json::Value::Kind::string) reader.fail("metadata \"" + v.keys[j] + "\" is not a string");
      out.metadata[v.keys[j]] = v.values[j].text;
    }
  }
  // The buffer, covered exactly: sorted by offset, each tensor begins where the last ended.
  const uint64_t buffer = bytes.size() - 8 - n;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const Entry& e : entries) {
    if (e.begin != covered)
      reader.fail("tensor \"" + e.name + "\" begins at byte " + std::to_string(e.begin) + " of the data, where " +
                  (e.begin > covered ? "a gap" : "an overlap") + " with the tensor before it starts at " +
                  std::to_string(covered));
    covered = e.end;
  }
  user_check(covered == buffer, loc)
      << "\"" << file << "\" holds " << buffer << " data bytes but its tensors cover " << covered << "; the file is "
      << (buffer < covered ? "truncated" : "damaged (bytes no tensor owns)");
  const unsigned char* data = u + 8 + n;
  for (const Entry& e : entries) {
    const std::string type = e.type->name;
    const bool floating = type == "F32" || type == "F64" || type == "F16" || type == "BF16";
    HostTensor t(Shape(e.shape), floating ? DType::f32 : DType::i32);
    convert(e, data + e.begin, t, file, loc);
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace towerjit
