#include "runtime/checkpoint/checkpoint_format.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "dsl/error.h"

namespace towerjit {
namespace {

constexpr size_t kHeaderBytes = 16;  // magic, version, file size
constexpr size_t kCrcBytes = 4;

uint32_t crc32_of(std::string_view bytes) {
  // zlib takes at most 4 GiB per call (uInt).
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t at = 0; at < bytes.size();) {
    const size_t n = std::min<size_t>(bytes.size() - at, std::numeric_limits<uInt>::max());
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(n));
    at += n;
  }
  return static_cast<uint32_t>(crc);
}

// A variable's dtype in the file: 0 f32, 1 i32, 2 bf16, 3 f16 (bf16 and f16 stored as they
// are, 2 bytes an element; codes 2 and 3 came after version 1 files were first written, and
// older builds refuse them as an unknown code).
uint32_t dtype_code(DType t) {
  switch (t) {
    case DType::f32: return 0;
    case DType::i32: return 1;
    case DType::bf16: return 2;
    case DType::f16: return 3;
  }
  return 0;
}
constexpr DType kDtypeOfCode[] = {DType::f32, DType::i32, DType::bf16, DType::f16};

class Writer {
 public:
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void str(std::string_view s) {
    u64(s.size());
    out.append(s);
  }
  // `n` elements of `size` bytes (f32 bits, i32, or bf16 / f16 bits), little-endian.
  void words(const void* data, int64_t n, int size) {
    if (n == 0) return;  // an empty tensor's data() may be null, which memcpy may not take
    if constexpr (std::endian::native == std::endian::little) {
      out.append(static_cast<const char*>(data), static_cast<size_t>(n) * size);
    } else {
      for (int64_t i = 0; i < n; ++i)
        for (int b = size - 1; b >= 0; --b) out.push_back(static_cast<const char*>(data)[i * size + b]);
    }
  }
  std::string out;
};

// Reads what Writer wrote; every read is bounds-checked, so a malformed file (one that passes
// the checksum yet is not what we wrote) is an error, never a crash.
class Reader {
 public:
  Reader(std::string_view bytes, const std::string& file, Loc loc) : bytes_(bytes), file_(file), loc_(loc) {}
  uint32_t u32(const char* what) {
    need(4, what);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes_[at_++])) << (8 * i);
    return v;
  }
  uint64_t u64(const char* what) {
    need(8, what);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes_[at_++])) << (8 * i);
    return v;
  }
  int64_t i64(const char* what) { return static_cast<int64_t>(u64(what)); }
  std::string str(const char* what) {
    const uint64_t n = u64(what);
    need(n, what);
    std::string s(bytes_.substr(at_, n));
    at_ += n;
    return s;
  }
  void words(void* data, int64_t n, int size, const char* what) {
    need(static_cast<uint64_t>(n) * size, what);
    if (n == 0) return;  // an empty tensor's data() may be null, which memcpy may not take
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(data, bytes_.data() + at_, static_cast<size_t>(n) * size);
      at_ += n * size;
    } else {
      for (int64_t i = 0; i < n; ++i)
        for (int b = size - 1; b >= 0; --b) static_cast<char*>(data)[i * size + b] = bytes_[at_++];
    }
  }
  size_t left() const { return bytes_.size() - at_; }
  void need(uint64_t n, const std::string& what) {
    user_check(n <= left(), loc_) << "\"" << file_ << "\" is malformed: " << what << " at byte " << at_
                                  << " needs " << n << " bytes but only " << left()
                                  << " are left; it was not written by towerjit's save_checkpoint";
  }
  const std::string& file() const { return file_; }
  Loc loc() const { return loc_; }

 private:
  std::string_view bytes_;
  const std::string& file_;
  Loc loc_;
  size_t at_ = 0;
};

HostTensor read_variable(Reader& in, const std::string& name) {
  const uint32_t code = in.u32("a variable's dtype");
  user_check(code <= 3, in.loc()) << "\"" << in.file() << "\" is malformed: variable \"" << name
                                  << "\" has dtype code " << code
                                  << " (0 is f32, 1 is i32, 2 is bf16, 3 is f16); load an earlier checkpoint";
  const DType dtype = kDtypeOfCode[code];
  const uint32_t rank = in.u32("a variable's rank");
  in.need(static_cast<uint64_t>(rank) * 8, "variable \"" + name + "\"'s shape");
  std::vector<int64_t> dims(rank);
  for (auto& d : dims) {
    d = in.i64("a dimension");
    user_check(d >= 0, in.loc()) << "\"" << in.file() << "\" is malformed: variable \"" << name
                                 << "\" has a negative dimension " << d << "; load an earlier checkpoint";
  }
  // The element count is bounded by the bytes left before it is multiplied out, so a huge
  // shape cannot overflow past the check. With a 0 dimension the tensor holds nothing, but
  // Shape multiplies every dimension in order ([2^40, 2^40, 0] overflows before the 0), so the
  // others must still multiply within int64.
  const bool empty = std::find(dims.begin(), dims.end(), 0) != dims.end();
  const uint64_t limit = empty ? uint64_t{INT64_MAX} : in.left() / dtype_bytes(dtype);
  uint64_t elements = 1;
  for (int64_t d : dims) {
    if (d == 0) continue;
    user_check(elements <= limit / static_cast<uint64_t>(d), in.loc())
        << "\"" << in.file() << "\" is malformed: variable \"" << name << "\"'s shape " << Shape(dims).str()
        << (empty ? " has more elements than a tensor can hold" : " needs more bytes than the file has left");
    elements *= static_cast<uint64_t>(d);
  }
  HostTensor t(Shape(std::move(dims)), dtype);
  in.words(t.data(), t.size(), dtype_bytes(dtype), "a variable's data");
  return t;
}

// `name` must sort after every name read so far.
template <typename Map>
void check_follows(const Map& read, const std::string& name, const char* what, const Reader& in) {
  user_check(read.empty() || read.rbegin()->first < name, in.loc())
      << "\"" << in.file() << "\" is malformed: " << what << " \"" << name << "\" comes after \""
      << read.rbegin()->first << "\" (they are written sorted, each once); it was not written by "
      << "towerjit's save_checkpoint";
}

}  // namespace

std::string encode_checkpoint(const Checkpoint& c, Loc loc) {
  Writer out;
  out.out.append(kCheckpointMagic, 4);
  out.u32(kCheckpointVersion);
  out.u64(0);  // the file size, filled in below
  out.i64(c.step);
  out.i64(c.position.epoch);
  out.i64(c.position.batch);
  out.u64(c.metadata.size());
  for (const auto& [key, value] : c.metadata) out.str(key), out.str(value);
  out.u64(c.variables.size());
  for (const auto& [name, t] : c.variables) {
    const auto& dims = t.shape.dims();
    user_check(std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d >= 0; }), loc)
        << "cannot save variable \"" << name << "\" of shape " << t.shape.str()
        << ": a checkpoint holds concrete shapes; bind the batch first";
    const size_t held = t.dtype == DType::f32 ? t.f32.size() : t.dtype == DType::i32 ? t.i32.size() : t.b16.size();
    user_check(held == static_cast<size_t>(t.size()), loc)
        << "cannot save variable \"" << name << "\": it holds " << held << " " << dtype_name(t.dtype)
        << " elements but its shape " << t.shape.str() << " needs " << t.size();
    out.str(name);
    out.u32(dtype_code(t.dtype));
    out.u32(static_cast<uint32_t>(dims.size()));
    for (int64_t d : dims) out.i64(d);
    out.words(t.data(), t.size(), dtype_bytes(t.dtype));
  }
  Writer size;
  size.u64(out.out.size() + kCrcBytes);
  out.out.replace(8, 8, size.out);
  out.u32(crc32_of(out.out));
  return std::move(out.out);
}

Checkpoint decode_checkpoint(std::string_view bytes, const std::string& file, Loc loc) {
  const std::string_view magic(kCheckpointMagic, 4);
  const bool magic_ok = bytes.substr(0, 4) == magic.substr(0, std::min<size_t>(bytes.size(), 4));
  user_check(!bytes.empty() && magic_ok, loc)
      << "\"" << file << "\" is not a towerjit checkpoint: "
      << (bytes.empty() ? "it is empty" : "it does not start with \"TJCK\"")
      << "; pass a ckpt-<step>.tjck file or a directory save_checkpoint wrote";
  user_check(bytes.size() >= kHeaderBytes + kCrcBytes, loc)
      << "\"" << file << "\" is truncated: it has " << bytes.size()
      << " bytes, fewer than a checkpoint's header; load an earlier checkpoint";
  Reader in(bytes, file, loc);
  in.u32("the magic");
  const uint32_t version = in.u32("the version");
  user_check(version == kCheckpointVersion, loc)
      << "\"" << file << "\" is checkpoint format version " << version << "; this build of towerjit reads version "
      << kCheckpointVersion << "; load it with the towerjit that wrote it (or a newer one)";
  const uint64_t expected = in.u64("the file size");
  user_check(bytes.size() >= expected, loc)
      << "\"" << file << "\" is truncated: it has " << bytes.size() << " bytes but its header says " << expected
      << " (an interrupted copy?); load an earlier checkpoint";
  user_check(bytes.size() == expected, loc)
      << "\"" << file << "\" is damaged: it has " << bytes.size() << " bytes but its header says " << expected
      << "; load an earlier checkpoint";
  const std::string_view body = bytes.substr(0, bytes.size() - kCrcBytes);
  Reader tail(bytes.substr(body.size()), file, loc);
  const uint32_t stored = tail.u32("the checksum"), computed = crc32_of(body);
  user_check(stored == computed, loc) << "\"" << file << "\" is damaged: checksum mismatch (stored " << std::hex
                                      << stored << ", computed " << computed << std::dec
                                      << "); load an earlier checkpoint";

  Reader fields(body, file, loc);
  fields.need(kHeaderBytes, "the header");
  fields.u64("the magic and version"), fields.u64("the file size");
  Checkpoint c;
  c.step = fields.i64("the step");
  c.position.epoch = fields.i64("the pipeline epoch");
  c.position.batch = fields.i64("the pipeline batch");
  // Keys and names come sorted, each once, as encode_checkpoint writes them from its maps: a
  // repeated one would silently replace or drop an entry, so it is refused like any other damage.
  for (uint64_t n = fields.u64("the metadata count"); n > 0; --n) {
    std::string key = fields.str("a metadata key");
    check_follows(c.metadata, key, "metadata key", fields);
    c.metadata.emplace_hint(c.metadata.end(), std::move(key), fields.str("a metadata value"));
  }
  for (uint64_t n = fields.u64("the variable count"); n > 0; --n) {
    std::string name = fields.str("a variable's name");
    check_follows(c.variables, name, "variable", fields);
    HostTensor t = read_variable(fields, name);
    c.variables.emplace_hint(c.variables.end(), std::move(name), std::move(t));
  }
  user_check(fields.left() == 0, loc) << "\"" << file << "\" is malformed: " << fields.left()
                                      << " bytes follow the last variable; load an earlier checkpoint";
  return c;
}

}  // namespace towerjit
