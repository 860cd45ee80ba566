// Fuzz target: the IDX reader (runtime/data/idx.cpp), through read_idx on a real file, as a
// user's data directory reaches it. The first byte chooses how the rest is written:
//   even: as it is (a plain IDX file, or a gzip stream the fuzzer mutates directly);
//   odd:  gzip-compressed by the target, so mutations of the IDX bytes also reach the reader
//         behind zlib's inflate (the Debian dataset's files are gzip).
// Any input either reads or raises towerjit::Error. What reads must be what the header says:
// labels [N] as i32 bytes, images [N, rows * cols] as f32 in [0, 1].
#include <zlib.h>

#include <cmath>

#include "fuzz_util.h"
#include "runtime/data/idx.h"

namespace {

namespace fz = towerjit::fuzz;

void write_gzip(const std::string& path, std::string_view bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr) fz::finding("cannot write the scratch file " + path);
  if (!bytes.empty() && gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) <= 0)
    fz::finding("cannot compress into " + path);
  gzclose(f);
}

void check_result(const towerjit::HostTensor& t, std::string_view idx) {
  using towerjit::DType;
  const int rank = static_cast<unsigned char>(idx[3]);
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (static_cast<size_t>(t.size()) != idx.size() - header) fz::finding("element count differs from the data bytes");
  if (rank == 1) {
    if (t.dtype != DType::i32 || t.shape.rank() != 1) fz::finding("labels are not an i32 vector");
    for (int64_t i = 0; i < t.size(); ++i)
      if (t.i32[i] != static_cast<unsigned char>(idx[header + i])) fz::finding("a label differs from its byte");
  } else {
    if (t.dtype != DType::f32 || t.shape.rank() != 2) fz::finding("images are not an f32 matrix");
    for (int64_t i = 0; i < t.size(); ++i)
      if (!(t.f32[i] >= 0 && t.f32[i] <= 1)) fz::finding("a pixel lies outside [0, 1]");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz::Bytes in(data, size);
  const bool compress = in.u8() & 1;
  const std::string_view idx = in.rest();
  const std::string path = (fz::scratch_dir() / "data-idx").string();
  if (compress) write_gzip(path, idx);
  else fz::write_file(path, idx);
  try {
    const towerjit::HostTensor t = towerjit::data::read_idx(path);
    // Known bytes to check against: what the target compressed, or a plain file (one that
    // reads and does not start like gzip, 1f 8b, is the IDX bytes themselves).
    if (compress || static_cast<unsigned char>(idx[0]) != 0x1f) check_result(t, idx);
  } catch (const towerjit::Error& e) {
    fz::expect_user_error(e);
  }
  return 0;
}
