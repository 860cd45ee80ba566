#include "runtime/data/idx.h"

#include <zlib.h>

#include <filesystem>
#include <source_location>
#include <vector>

#include "dsl/error.h"

namespace towerjit::data {
namespace {

// The whole file, inflated when it is gzip (gzread passes plain files through). Errors name
// `loc`, the line that asked for the data, as read_idx's own do.
std::vector<unsigned char> read_all(const std::string& path, std::source_location loc) {
  gzFile f = gzopen(path.c_str(), "rb");
  user_check(f != nullptr, loc)
      << "cannot open \"" << path << "\"; check the path and its permissions";
  std::vector<unsigned char> bytes;
  unsigned char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  int err = 0;
  const char* message = gzerror(f, &err);
  const bool failed = n < 0 || (err != Z_OK && err != Z_STREAM_END);
  const std::string why = failed ? message : "";
  gzclose(f);
  user_check(!failed, loc)
      << "\"" << path << "\" is not a readable gzip or IDX file (" << why
      << "); the file is damaged: fetch it again";
  return bytes;
}

uint32_t big_endian(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

// Errors name `loc`: the line that asked for the data (the user's, through fashion_mnist()).
HostTensor read_idx(const std::string& path, const std::string& hint, std::source_location loc) {
  user_check(std::filesystem::exists(path), loc)
      << "data file \"" << path << "\" does not exist" << (hint.empty() ? "" : "; " + hint);
  const std::vector<unsigned char> bytes = read_all(path, loc);
  user_check(bytes.size() >= 4 && bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 0x08 &&
                 (bytes[3] == 1 || bytes[3] == 3),
             loc)
      << "\"" << path << "\" has a bad IDX magic number (expected 00 00 08 01 for labels or "
      << "00 00 08 03 for images); is it an MNIST-format file?";
  const int rank = bytes[3];
  user_check(bytes.size() >= 4u + 4u * rank, loc)
      << "\"" << path << "\" ends inside its header (" << bytes.size() << " bytes); it is truncated";
  std::vector<int64_t> dims;
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) dims.push_back(big_endian(&bytes[4 + 4 * i])), count *= dims.back();
  const size_t header = 4 + 4 * rank;
  user_check(bytes.size() == header + count, loc)
      << "\"" << path << "\" holds " << bytes.size() - header << " data bytes but its header says "
      << count << " (" << dims[0] << " items); the file is truncated or damaged";
  if (rank == 1) {
    HostTensor labels(Shape{dims[0]}, DType::i32);
    for (int64_t i = 0; i < count; ++i) labels.i32[i] = bytes[header + i];
    return labels;
  }
  HostTensor images(Shape{dims[0], dims[1] * dims[2]});
  for (int64_t i = 0; i < count; ++i) images.f32[i] = bytes[header + i] / 255.0f;
  return images;
}

}  // namespace towerjit::data
