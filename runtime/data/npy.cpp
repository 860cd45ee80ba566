#include "runtime/data/npy.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <vector>

#include "dsl/error.h"
#include "runtime/data/whole_file.h"
#include "runtime/checkpoint/atomic_file.h"

namespace towerjit::data {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

// The header's dict, as numpy writes it: three keys, in any order, each once.
struct Header {
  std::string descr;
  std::optional<bool> fortran;
  std::optional<std::vector<uint64_t>> shape;
};

// A strict reader of the Python literal subset numpy's header uses: {'key': value, ...} where a
// value is a quoted string, True/False or a tuple of non-negative integers. Anything else is a
// damaged header; nothing here evaluates Python.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& file, std::source_location loc)
      : s_(text), file_(file), loc_(loc) {}

  Header parse() {
    Header h;
    bool have_descr = false;
    expect('{');
    while (!peek('}')) {
      const std::string key = quoted();
      expect(':');
      if (key == "descr" && !have_descr) {
        h.descr = quoted(), have_descr = true;
      } else if (key == "fortran_order" && !h.fortran) {
        h.fortran = boolean();
      } else if (key == "shape" && !h.shape) {
        h.shape = tuple();
      } else {
        fail("an unexpected or repeated key '" + key + "'");
      }
      if (!peek(',')) break;
      expect(',');
    }
    expect('}');
    skip_space();
    if (pos_ != s_.size()) fail("text after the closing brace");
    if (!have_descr || !h.fortran || !h.shape) fail("no 'descr', 'fortran_order' or 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw Error("towerjit: \"" + file_ + "\" has a damaged .npy header (" + what + " at character " +
                std::to_string(pos_) + "); write the file again with numpy.save (" + where(loc_) + ")");
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t')) ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("a missing '") + c + "'");
    ++pos_;
  }
  std::string quoted() {
    skip_space();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) fail("a missing quoted string");
    const char q = s_[pos_++];
    const size_t end = s_.find(q, pos_);
    if (end == std::string_view::npos || end - pos_ > 64) fail("an unterminated or overlong string");
    std::string out(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{std::string_view("True"), true}, {"False", false}})
      if (s_.substr(pos_, word.size()) == word) return pos_ += word.size(), value;
    fail("'fortran_order' that is neither True nor False");
  }
  uint64_t integer() {
    skip_space();
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const uint64_t digit = static_cast<uint64_t>(s_[pos_++] - '0');
      if (v > (UINT64_MAX - digit) / 10) fail("a dimension past 2^64");
      v = v * 10 + digit;
    }
    if (pos_ == start) fail("a dimension that is not a non-negative integer");
    if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2's long literal
    return v;
  }
  std::vector<uint64_t> tuple() {
    std::vector<uint64_t> dims;
    expect('(');
    while (!peek(')')) {
      if (dims.size() >= 32) fail("more than 32 dimensions");
      dims.push_back(integer());
      if (!peek(',')) break;
      expect(',');
    }
    expect(')');
    return dims;
  }

  std::string_view s_;
  size_t pos_ = 0;
  const std::string& file_;
  std::source_location loc_;
};

struct TypeInfo {
  NpyType type;
  size_t size;
};

// 'descr' as numpy writes it: a byte order ('<' little, '>' big, '|' not applicable, '='
// native), a kind and a size. Returns the type and whether the bytes are big-endian.
std::pair<TypeInfo, bool> element_type(const std::string& descr, const std::string& file, std::source_location loc) {
  const char order = descr.empty() ? '?' : descr[0];
  const std::string code = descr.size() > 1 ? descr.substr(1) : "";
  const bool known_order = order == '<' || order == '>' || order == '|' || order == '=';
  std::optional<TypeInfo> info;
  if (code == "f4") info = TypeInfo{NpyType::f32, 4};
  if (code == "f8") info = TypeInfo{NpyType::f64, 8};
  if (code == "i4") info = TypeInfo{NpyType::i32, 4};
  if (code == "i8") info = TypeInfo{NpyType::i64, 8};
  if (code == "u1") info = TypeInfo{NpyType::u8, 1};
  if (code == "b1") info = TypeInfo{NpyType::boolean, 1};
  user_check(known_order && info, loc)
      << "\"" << file << "\" holds elements of type '" << descr << "', which towerjit does not read (it reads "
      << "float32, float64, int32, int64, uint8 and bool); convert the array first, e.g. "
      << "numpy.save(path, a.astype(numpy.float32)) for features or a.astype(numpy.int32) for labels";
  const bool big = order == '>' || (order == '=' && std::endian::native == std::endian::big);
  return {*info, big};
}

template <typename T>
T read_as(const unsigned char* p, bool big) {
  unsigned char b[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i) b[i] = big == (std::endian::native == std::endian::little) ? p[sizeof(T) - 1 - i] : p[i];
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

// For each element in C order, where it sits in the file: itself, or its Fortran-order place.
class ElementOrder {
 public:
  ElementOrder(const std::vector<int64_t>& dims, bool fortran) : dims_(dims), fortran_(fortran), index_(dims.size()) {
    int64_t stride = 1;
    for (int64_t d : dims) strides_.push_back(stride), stride *= d;
  }
  // The stored position of the next element in C order.
  int64_t next() {
    if (!fortran_) return c_++;
    int64_t at = 0;
    for (size_t j = 0; j < dims_.size(); ++j) at += index_[j] * strides_[j];
    for (size_t j = dims_.size(); j-- > 0;) {  // the last index moves fastest in C order
      if (++index_[j] < dims_[j]) break;
      index_[j] = 0;
    }
    return at;
  }

 private:
  std::vector<int64_t> dims_;
  bool fortran_;
  std::vector<int64_t> index_, strides_;
  int64_t c_ = 0;
};

}  // namespace

const char* npy_type_name(NpyType t) {
  switch (t) {
    case NpyType::f32: return "float32";
    case NpyType::f64: return "float64";
    case NpyType::i32: return "int32";
    case NpyType::i64: return "int64";
    case NpyType::u8: return "uint8";
    case NpyType::boolean: return "bool";
  }
  return "?";
}

NpyArray parse_npy(std::string_view bytes, const std::string& file, std::source_location loc) {
  user_check(bytes.size() >= 8 && bytes.substr(0, 6) == kMagic, loc)
      << "\"" << file << "\" is not an .npy file (it does not start with \\x93NUMPY); write it with numpy.save";
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  const int major = u[6];
  user_check(major >= 1 && major <= 3, loc) << "\"" << file << "\" is .npy format version " << major << "." << int{u[7]}
                                            << ", which towerjit does not read (it reads 1.0 to 3.0); write it with "
                                               "numpy.save from numpy 1.9 or later";
  const size_t length_bytes = major == 1 ? 2 : 4;
  user_check(bytes.size() >= 8 + length_bytes, loc)
      << "\"" << file << "\" ends inside its .npy header (" << bytes.size() << " bytes); the file is truncated";
  uint64_t header_length = major == 1 ? read_as<uint16_t>(u + 8, false) : read_as<uint32_t>(u + 8, false);
  const uint64_t data_start = 8 + length_bytes + header_length;
  user_check(data_start <= bytes.size(), loc)
      << "\"" << file << "\" has an .npy header of " << header_length << " bytes but holds only " << bytes.size()
      << " bytes in all; the file is truncated";
  const std::string_view text = bytes.substr(8 + length_bytes, header_length);
  const Header h = HeaderParser(text, file, loc).parse();
  const auto [info, big] = element_type(h.descr, file, loc);

  // The element count, saturating: a count past any file's size fails the size check below
  // before anything is allocated. A 0 dimension makes it 0, as numpy has it.
  // The product of the non-zero dimensions must fit too: an empty array's shape is still a shape.
  uint64_t count = 1, nonzero = 1;
  std::vector<int64_t> dims;
  for (uint64_t d : *h.shape) {
    dims.push_back(static_cast<int64_t>(std::min<uint64_t>(d, INT64_MAX)));
    count = d == 0 ? 0 : count > UINT64_MAX / d ? UINT64_MAX : count * d;
    if (d != 0) nonzero = nonzero > UINT64_MAX / d ? UINT64_MAX : nonzero * d;
  }
  const bool fits = nonzero <= static_cast<uint64_t>(INT64_MAX) / 8;
  user_check(fits, loc) << "\"" << file << "\" has a shape " << Shape(dims).str()
                        << " whose element count does not fit a tensor; the header is damaged";
  const uint64_t held = bytes.size() - data_start;
  const uint64_t want = count * info.size;
  user_check(held == want, loc) << "\"" << file << "\" holds " << held << " data bytes but its header says "
                                << Shape(dims).str() << " " << npy_type_name(info.type) << ", " << want
                                << " bytes; the file is " << (held < want ? "truncated" : "damaged (extra bytes)");

  NpyArray out;
  out.stored = info.type;
  const bool floating = info.type == NpyType::f32 || info.type == NpyType::f64;
  out.values = HostTensor(Shape(dims), floating ? DType::f32 : DType::i32);
  ElementOrder order(dims, *h.fortran && dims.size() > 1);
  const unsigned char* data = u + data_start;
  for (uint64_t i = 0; i < count; ++i) {
    const unsigned char* p = data + order.next() * info.size;
    switch (info.type) {
      case NpyType::f32: out.values.f32[i] = read_as<float>(p, big); break;
      case NpyType::f64: out.values.f32[i] = static_cast<float>(read_as<double>(p, big)); break;
      case NpyType::i32: out.values.i32[i] = read_as<int32_t>(p, big); break;
      case NpyType::u8: out.values.i32[i] = *p; break;
      case NpyType::boolean: out.values.i32[i] = *p != 0; break;
      case NpyType::i64: {
        const int64_t v = read_as<int64_t>(p, big);
        user_check(v >= INT32_MIN && v <= INT32_MAX, loc)
            << "\"" << file << "\" holds int64 value " << v << " at element " << i
            << ", outside int32's range, which towerjit stores integers in; store it as float32 if it is a feature, "
               "or check the data";
        out.values.i32[i] = static_cast<int32_t>(v);
        break;
      }
    }
  }
  return out;
}

NpyArray load_npy_array(const std::string& path, std::source_location loc) {
  const std::string bytes = read_whole_file(path, loc);
  NpyArray a = parse_npy(bytes, path, loc);
  if (a.stored == NpyType::f64)
    std::fprintf(stderr, "towerjit: note: \"%s\" holds float64; read as float32 (rounded to nearest)\n", path.c_str());
  return a;
}

HostTensor load_npy(const std::string& path, std::source_location loc) { return load_npy_array(path, loc).values; }

std::string encode_npy(const HostTensor& t, std::source_location loc) {
  const size_t held = t.dtype == DType::f32 ? t.f32.size() : t.i32.size();
  user_check(held == static_cast<size_t>(t.size()), loc)
      << "the tensor " << t.shape.str() << " holds " << held << " values, not " << t.size() << "; fill it";
  std::string shape = "(";
  for (int i = 0; i < t.shape.rank(); ++i) shape += std::to_string(t.shape[i]) + (t.shape.rank() == 1 ? "," : i + 1 < t.shape.rank() ? ", " : "");
  shape += ")";
  std::string header = std::string("{'descr': '") + (t.dtype == DType::f32 ? "<f4" : "<i4") +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // numpy pads the header with spaces and a newline so the data starts on a 64-byte boundary.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out(kMagic);
  out += '\x01', out += '\x00';
  out += static_cast<char>(header.size() & 0xff), out += static_cast<char>(header.size() >> 8);
  out += header;
  const size_t at = out.size();
  out.resize(at + held * 4);
  for (size_t i = 0; i < held; ++i) {  // little-endian whatever the host
    uint32_t v;
    std::memcpy(&v, t.dtype == DType::f32 ? static_cast<const void*>(&t.f32[i]) : &t.i32[i], 4);
    for (int b = 0; b < 4; ++b) out[at + 4 * i + b] = static_cast<char>(v >> (8 * b));
  }
  return out;
}

void save_npy(const std::string& path, const HostTensor& t, std::source_location loc) {
  write_file_atomically(path, encode_npy(t, loc), loc);
}

}  // namespace towerjit::data
