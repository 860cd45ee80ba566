// Bytes of .npy files, zip archives and safetensors files built by hand, as other writers
// (numpy, Python's zipfile, safetensors) lay them out, for the readers' tests and the fuzz
// targets' seeds.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace towerjit::testing {

// An .npy file, version 1.0: `header` is the dict's text ("{'descr': ...}"); padded as numpy
// pads it (spaces and a newline, the data 64-byte aligned).
inline std::string npy_bytes(std::string header, const std::string& data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major), out += '\0';
  for (size_t i = 0; i < prefix - 8; ++i) out += static_cast<char>(header.size() >> (8 * i));
  return out + header + data;
}

// `v`'s bytes in little- or big-endian order.
template <typename T>
std::string element_bytes(T v, bool big) {
  std::string b(sizeof(T), '\0');
  const auto* p = reinterpret_cast<const char*>(&v);
  for (size_t i = 0; i < sizeof(T); ++i) b[big ? sizeof(T) - 1 - i : i] = p[i];
  return b;
}

inline std::string le(uint64_t v, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += static_cast<char>(v >> (8 * i));
  return out;
}

inline std::string raw_deflate(const std::string& data) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, data.size()) + 16, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A zip archive of `members` (name, bytes), each stored or deflated, as numpy.savez and
// numpy.savez_compressed write them (without numpy's zip64 extra fields in the local headers).
inline std::string zip_bytes(const std::vector<std::pair<std::string, std::string>>& members, bool deflated) {
  std::string out, directory;
  for (const auto& [name, data] : members) {
    const uint32_t crc = static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(data.data()),
                                                     static_cast<uInt>(data.size())));
    const std::string packed = deflated ? raw_deflate(data) : data;
    const uint64_t offset = out.size();
    const std::string common = le(deflated ? 8 : 0, 2) + le(0, 4) + le(crc, 4) + le(packed.size(), 4) +
                               le(data.size(), 4) + le(name.size(), 2) + le(0, 2);
    out += le(0x04034b50, 4) + le(20, 2) + le(0, 2) + common + name + packed;
    directory += le(0x02014b50, 4) + le(20, 2) + le(20, 2) + le(0, 2) + common + le(0, 2) + le(0, 2) + le(0, 2) +
                 le(0, 4) + le(offset, 4) + name;
  }
  const uint64_t at = out.size();
  out += directory;
  out += le(0x06054b50, 4) + le(0, 2) + le(0, 2) + le(members.size(), 2) + le(members.size(), 2) +
         le(directory.size(), 4) + le(at, 4) + le(0, 2);
  return out;
}

// A safetensors file from its header's JSON text and its data buffer.
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return le(header.size(), 8) + header + data;
}

}  // namespace towerjit::testing
