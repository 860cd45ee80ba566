#include "runtime/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <source_location>
#include <vector>

#include "dsl/error.h"

namespace towerjit::data {
namespace {

// A file read as far as asked, inflated when it is gzip (gzread passes plain files through),
// so the header is checked before any data is inflated and no more is inflated than the header
// says: a damaged header, or a gzip bomb, costs what its header claims at most. Errors name
// `loc`, the line that asked for the data, as read_idx's own do.
class Inflater {
 public:
  Inflater(const std::string& path, std::source_location loc) : path_(path), loc_(loc), f_(gzopen(path.c_str(), "rb")) {
    user_check(f_ != nullptr, loc) << "cannot open \"" << path << "\"; check the path and its permissions";
  }
  ~Inflater() { gzclose(f_); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Appends the next `n` bytes to `out`, or as many as there are before the end.
  void read(std::vector<unsigned char>& out, uint64_t n) {
    while (n > 0) {
      const unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(n, 1 << 16));
      const size_t at = out.size();
      out.resize(at + chunk);
      const int got = gzread(f_, out.data() + at, chunk);
      int err = 0;
      const char* message = gzerror(f_, &err);
      const bool failed = got < 0 || (err != Z_OK && err != Z_STREAM_END);
      user_check(!failed, loc_) << "\"" << path_ << "\" is not a readable gzip or IDX file (" << message
                                << "); the file is damaged: fetch it again";
      out.resize(at + static_cast<size_t>(got));
      if (static_cast<unsigned>(got) < chunk) return;  // the end
      n -= chunk;
    }
  }

 private:
  const std::string path_;
  const std::source_location loc_;
  const gzFile f_;
};

uint32_t big_endian(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

// Errors name `loc`: the line that asked for the data (the user's, through fashion_mnist()).
HostTensor read_idx(const std::string& path, const std::string& hint, std::source_location loc) {
  user_check(std::filesystem::exists(path), loc)
      << "data file \"" << path << "\" does not exist" << (hint.empty() ? "" : "; " + hint);
  Inflater file(path, loc);
  std::vector<unsigned char> bytes;
  file.read(bytes, 4);
  user_check(bytes.size() >= 4 && bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 0x08 &&
                 (bytes[3] == 1 || bytes[3] == 3),
             loc)
      << "\"" << path << "\" has a bad IDX magic number (expected 00 00 08 01 for labels or "
      << "00 00 08 03 for images); is it an MNIST-format file?";
  const int rank = bytes[3];
  file.read(bytes, 4u * rank);
  user_check(bytes.size() >= 4u + 4u * rank, loc)
      << "\"" << path << "\" ends inside its header (" << bytes.size() << " bytes); it is truncated";
  // Three dimensions of up to 2^32 - 1 multiply past 2^64: the count saturates instead (it is
  // then more than any file holds), so a damaged header fails the size check below, never
  // overflows. A 0 dimension makes it 0 whatever came before, as it should.
  std::vector<int64_t> dims;
  uint64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    const uint32_t d = big_endian(&bytes[4 + 4 * i]);
    dims.push_back(d);
    count = d == 0 ? 0 : count > UINT64_MAX / d ? UINT64_MAX : count * d;
  }
  const size_t header = 4 + 4 * rank;
  // The data the header promises, and one byte more, which must not be there.
  if (count != UINT64_MAX) file.read(bytes, count + 1);
  const uint64_t held = bytes.size() - header;
  user_check(held == count, loc)
      << "\"" << path << "\" holds " << (held > count ? "more than " + std::to_string(count) : std::to_string(held))
      << " data bytes but its header says "
      << (count == UINT64_MAX ? "more than any file holds" : std::to_string(count)) << " (" << dims[0]
      << " items); the file is truncated or damaged";
  // With no images the size check above says nothing of rows x cols, which must still fit a shape.
  user_check(rank == 1 || uint64_t(dims[1]) * uint64_t(dims[2]) <= uint64_t{INT64_MAX}, loc)
      << "\"" << path << "\" has images of " << dims[1] << " x " << dims[2]
      << " pixels, more than a tensor can hold; the header is damaged";
  if (rank == 1) {
    HostTensor labels(Shape{dims[0]}, DType::i32);
    for (uint64_t i = 0; i < count; ++i) labels.i32[i] = bytes[header + i];
    return labels;
  }
  HostTensor images(Shape{dims[0], dims[1] * dims[2]});
  for (uint64_t i = 0; i < count; ++i) images.f32[i] = bytes[header + i] / 255.0f;
  return images;
}

}  // namespace towerjit::data
