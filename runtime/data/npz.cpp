#include "runtime/data/npz.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "dsl/error.h"
#include "runtime/data/whole_file.h"

namespace towerjit::data {
namespace {

// Deflate expands at most about 1032 to 1 (a stream of maximal-length matches): a member
// claiming more than this times its compressed size is damaged, refused before inflating.
constexpr uint64_t kMaxDeflateRatio = 1032;

// Little-endian fields of the archive, every read bounds-checked against the bytes.
class Reader {
 public:
  Reader(std::string_view bytes, const std::string& file, std::source_location loc)
      : b_(bytes), file_(file), loc_(loc) {}

  // Throws unless [at, at + n) lies inside the archive; `what` names the structure.
  void need(uint64_t at, uint64_t n, const char* what) const {
    user_check(at <= b_.size() && n <= b_.size() - at, loc_)
        << "\"" << file_ << "\" is a damaged or truncated .npz archive: its " << what << " at byte " << at
        << " runs past the end of the file (" << b_.size() << " bytes); write it again with numpy.savez";
  }
  uint64_t le(uint64_t at, int n, const char* what) const {
    need(at, static_cast<uint64_t>(n), what);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b_[at + i]);
    return v;
  }
  std::string_view slice(uint64_t at, uint64_t n, const char* what) const {
    need(at, n, what);
    return b_.substr(at, n);
  }
  uint64_t size() const { return b_.size(); }

 private:
  std::string_view b_;
  const std::string& file_;
  std::source_location loc_;
};

struct Directory {
  uint64_t entries = 0, offset = 0, size = 0;
};

// The end-of-central-directory record (the last one in the file's final 64 KiB + 22 bytes),
// and its zip64 form when a field is saturated.
Directory find_directory(const Reader& r, const std::string& file, std::source_location loc) {
  const int64_t n = static_cast<int64_t>(r.size());
  const int64_t lowest = std::max<int64_t>(0, n - 22 - 65535);
  for (int64_t back = n - 22; back >= lowest; --back) {
    const uint64_t at = static_cast<uint64_t>(back);
    if (r.le(at, 4, "end record") != 0x06054b50) continue;
    Directory d{r.le(at + 10, 2, "end record"), r.le(at + 16, 4, "end record"), r.le(at + 12, 4, "end record")};
    user_check(r.le(at + 4, 2, "end record") == 0 && r.le(at + 6, 2, "end record") == 0, loc)
        << "\"" << file << "\" is one part of a multi-part zip archive, which towerjit does not read; save the "
        << "arrays to one file with numpy.savez";
    if (d.entries == 0xffff || d.offset == 0xffffffff || d.size == 0xffffffff) {
      user_check(at >= 20 && r.le(at - 20, 4, "zip64 locator") == 0x07064b50, loc)
          << "\"" << file << "\" is a damaged .npz archive: a zip64 end record is announced but missing; write it "
          << "again with numpy.savez";
      const uint64_t z = r.le(at - 20 + 8, 8, "zip64 locator");
      user_check(r.le(z, 4, "zip64 end record") == 0x06064b50, loc)
          << "\"" << file << "\" is a damaged .npz archive: its zip64 end record is not where its locator says; "
          << "write it again with numpy.savez";
      d = {r.le(z + 32, 8, "zip64 end record"), r.le(z + 48, 8, "zip64 end record"), r.le(z + 40, 8, "zip64 end record")};
    }
    return d;
  }
  user_check(false, loc) << "\"" << file << "\" is not an .npz file (no zip end record); write it with numpy.savez, "
                         << "or read a single .npy file with load_npy";
  return {};
}

struct Member {
  std::string name;
  uint64_t method = 0, flags = 0, crc = 0, packed = 0, unpacked = 0, local = 0;
};

// The sizes and offset that are 0xffffffff in a central directory entry, from its zip64 extra
// field (id 1), which holds just those, in this order.
void read_zip64_extra(const Reader& r, uint64_t at, uint64_t length, Member& m) {
  for (uint64_t p = at; p + 4 <= at + length;) {
    const uint64_t id = r.le(p, 2, "extra field"), n = r.le(p + 2, 2, "extra field");
    r.need(p + 4, n, "extra field");
    if (id == 1) {
      uint64_t q = p + 4;
      for (uint64_t* field : {&m.unpacked, &m.packed, &m.local}) {
        if (*field != 0xffffffff) continue;
        if (q + 8 > p + 4 + n) break;
        *field = r.le(q, 8, "zip64 extra field"), q += 8;
      }
    }
    p += 4 + n;
  }
}

std::vector<Member> read_directory(const Reader& r, const Directory& d, const std::string& file,
                                   std::source_location loc) {
  r.need(d.offset, d.size, "central directory");
  // An entry takes 46 bytes at least: a count past that is damaged, refused before reserving.
  user_check(d.entries <= d.size / 46, loc) << "\"" << file << "\" is a damaged .npz archive: its directory claims "
                                            << d.entries << " members in " << d.size << " bytes; write it again";
  std::vector<Member> members;
  uint64_t at = d.offset;
  for (uint64_t i = 0; i < d.entries; ++i) {
    user_check(r.le(at, 4, "directory entry") == 0x02014b50, loc)
        << "\"" << file << "\" is a damaged .npz archive: directory entry " << i << " at byte " << at
        << " has no signature; write it again with numpy.savez";
    Member m;
    m.flags = r.le(at + 8, 2, "directory entry");
    m.method = r.le(at + 10, 2, "directory entry");
    m.crc = r.le(at + 16, 4, "directory entry");
    m.packed = r.le(at + 20, 4, "directory entry");
    m.unpacked = r.le(at + 24, 4, "directory entry");
    const uint64_t name = r.le(at + 28, 2, "directory entry"), extra = r.le(at + 30, 2, "directory entry"),
                   comment = r.le(at + 32, 2, "directory entry");
    m.local = r.le(at + 42, 4, "directory entry");
    m.name = std::string(r.slice(at + 46, name, "member name"));
    r.need(at + 46 + name, extra + comment, "directory entry");
    read_zip64_extra(r, at + 46 + name, extra, m);
    members.push_back(std::move(m));
    at += 46 + name + extra + comment;
  }
  return members;
}

std::string inflate_member(std::string_view packed, uint64_t unpacked, const std::string& where_,
                           std::source_location loc) {
  user_check(unpacked / kMaxDeflateRatio <= packed.size(), loc)
      << where_ << " claims " << unpacked << " bytes from " << packed.size()
      << " compressed, more than deflate can expand to; the archive is damaged";
  z_stream z{};
  user_check(inflateInit2(&z, -MAX_WBITS) == Z_OK, loc) << "zlib could not start inflating " << where_;
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data()));
  int rc = Z_OK;
  uint64_t fed = 0;
  // Grown as the data arrives, never to the claimed size up front.
  while (rc == Z_OK) {
    if (z.avail_in == 0 && fed < packed.size()) {
      const uint64_t n = std::min<uint64_t>(packed.size() - fed, 1u << 30);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data() + fed));
      z.avail_in = static_cast<uInt>(n), fed += n;
    }
    const size_t at = out.size();
    const uint64_t room = std::min<uint64_t>(unpacked - std::min<uint64_t>(unpacked, at), 1u << 20) + 1;
    out.resize(at + room);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + at);
    z.avail_out = static_cast<uInt>(room);
    rc = inflate(&z, Z_NO_FLUSH);
    out.resize(at + room - z.avail_out);
    if (out.size() > unpacked) rc = Z_DATA_ERROR;  // more than it claims
    if (rc == Z_BUF_ERROR && z.avail_in == 0 && fed == packed.size()) break;  // input ran out
    if (rc == Z_BUF_ERROR) rc = Z_OK;
  }
  inflateEnd(&z);
  user_check(rc == Z_STREAM_END && out.size() == unpacked, loc)
      << where_ << " does not inflate to the " << unpacked << " bytes it claims (zlib: "
      << (rc == Z_STREAM_END ? "a size mismatch" : z.msg ? z.msg : "the stream ends early")
      << "); the archive is damaged";
  return out;
}

}  // namespace

std::map<std::string, NpyArray> parse_npz(std::string_view bytes, const std::string& file, std::source_location loc) {
  const Reader r(bytes, file, loc);
  const std::vector<Member> members = read_directory(r, find_directory(r, file, loc), file, loc);
  // Members may not share bytes: each is inflated once, so the archive's whole output stays
  // within what its own bytes can expand to.
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const Member& m : members) {
    r.need(m.local, 30, "local header");
    const uint64_t data = m.local + 30 + r.le(m.local + 26, 2, "local header") + r.le(m.local + 28, 2, "local header");
    r.need(data, m.packed, "member data");
    spans.emplace_back(m.local, data + m.packed);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    user_check(spans[i].first >= spans[i - 1].second, loc)
        << "\"" << file << "\" is a damaged .npz archive: two members overlap at byte " << spans[i].first
        << "; write it again with numpy.savez";
  std::map<std::string, NpyArray> arrays;
  for (const Member& m : members) {
    const std::string where_ = "member \"" + m.name + "\" of \"" + file + "\"";
    user_check(m.name.size() > 4 && m.name.ends_with(".npy"), loc)
        << where_ << " is not an .npy array; an .npz archive holds only arrays, as numpy.savez writes them";
    user_check((m.flags & 1) == 0, loc) << where_ << " is encrypted; towerjit reads only unencrypted archives";
    user_check(m.method == 0 || m.method == 8, loc)
        << where_ << " is compressed with zip method " << m.method
        << ", which towerjit does not read (it reads stored and deflated members: numpy.savez and "
           "numpy.savez_compressed)";
    user_check(r.le(m.local, 4, "local header") == 0x04034b50, loc)
        << where_ << " has no local header at byte " << m.local << "; the archive is damaged";
    const uint64_t data = m.local + 30 + r.le(m.local + 26, 2, "local header") + r.le(m.local + 28, 2, "local header");
    const std::string_view packed = r.slice(data, m.packed, "member data");
    user_check(m.method == 8 || m.packed == m.unpacked, loc)
        << where_ << " is stored but its sizes differ (" << m.packed << " and " << m.unpacked
        << " bytes); the archive is damaged";
    const std::string inflated = m.method == 8 ? inflate_member(packed, m.unpacked, where_, loc) : std::string();
    const std::string_view npy = m.method == 8 ? std::string_view(inflated) : packed;
    const uLong crc = crc32_z(0L, reinterpret_cast<const Bytef*>(npy.data()), npy.size());
    user_check(crc == m.crc, loc) << where_ << " fails its CRC-32 check; the archive is damaged";
    const std::string name = m.name.substr(0, m.name.size() - 4);
    user_check(!arrays.count(name), loc) << "\"" << file << "\" holds two arrays named \"" << name
                                         << "\"; the archive is damaged";
    arrays.emplace(name, parse_npy(npy, where_, loc));
  }
  return arrays;
}

std::map<std::string, NpyArray> load_npz_arrays(const std::string& path, std::source_location loc) {
  const std::string bytes = read_whole_file(path, loc);
  auto arrays = parse_npz(bytes, path, loc);
  for (const auto& [name, a] : arrays)
    if (a.stored == NpyType::f64)
      std::fprintf(stderr, "towerjit: note: array \"%s\" of \"%s\" holds float64; read as float32 (rounded to nearest)\n",
                   name.c_str(), path.c_str());
  return arrays;
}

HostFeeds load_npz(const std::string& path, std::source_location loc) {
  HostFeeds out;
  for (auto& [name, a] : load_npz_arrays(path, loc)) out.emplace(name, std::move(a.values));
  return out;
}

}  // namespace towerjit::data
