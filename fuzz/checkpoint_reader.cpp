// Fuzz target: the checkpoint reader (runtime/checkpoint/checkpoint_format.cpp, and
// load_checkpoint's directory handling in checkpoint.cpp). The first byte chooses the path:
//   0: the rest as a file's bytes, to decode_checkpoint (magic, version, size, checksum);
//   1: the same, with the header's file size and the trailing CRC-32 set right first, so the
//      fuzzer reaches the records behind the checksum (step, position, metadata, variables);
//   2: a checkpoint directory: the rest up to the first 0 byte is its `latest` file, the
//      remainder (fixed up as in 1) is ckpt-1.tjck, loaded through load_checkpoint(dir).
// Any input either loads or raises towerjit::Error. What loads encodes back to the very bytes
// it came from: the format is canonical (names in order, no bytes to spare).
#include <zlib.h>

#include "fuzz_util.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_format.h"

namespace {

namespace fz = towerjit::fuzz;
namespace fs = std::filesystem;

void put_le(std::string& bytes, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) bytes[at + i] = static_cast<char>(v >> (8 * i));
}

// The header's size field and the CRC made consistent with the bytes (which keep their length).
std::string fix_up(std::string bytes) {
  if (bytes.size() < 20) return bytes;  // no room for a header and a CRC: rejected as it is
  put_le(bytes, 8, bytes.size(), 8);
  const size_t body = bytes.size() - 4;
  put_le(bytes, body, crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(body)), 4);
  return bytes;
}

void check_canonical(const towerjit::Checkpoint& c, std::string_view bytes) {
  if (towerjit::encode_checkpoint(c, {}) != bytes) fz::finding("a checkpoint that loads does not encode to its bytes");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz::Bytes in(data, size);
  const int mode = in.u8() % 3;
  std::string rest(in.rest());
  try {
    if (mode == 0 || mode == 1) {
      const std::string bytes = mode == 1 ? fix_up(rest) : rest;
      check_canonical(towerjit::decode_checkpoint(bytes, "fuzz.tjck", {}), bytes);
      return 0;
    }
    const size_t cut = std::min(rest.find('\0'), rest.size());
    const fs::path dir = fz::scratch_dir() / "checkpoints";
    fs::remove_all(dir);
    fs::create_directories(dir);
    fz::write_file(dir / "latest", std::string_view(rest).substr(0, cut));
    const std::string file = fix_up(rest.substr(std::min(cut + 1, rest.size())));
    fz::write_file(dir / "ckpt-1.tjck", file);
    check_canonical(towerjit::load_checkpoint(dir.string()), file);
  } catch (const towerjit::Error& e) {
    fz::expect_user_error(e);
  }
  return 0;
}
