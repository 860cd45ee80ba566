// Fuzz target: the compile cache's entry reader (jit/cpu/compile_cache.cpp): CompileCache::load
// on an entry file, then unpack_objects on a hit's payload, as the CPU compiler does before
// handing the objects to the JIT linker. The first byte chooses what is written:
//   even: the rest as the entry file itself (magic, version, size, checksum, payload);
//   odd:  the rest as a payload, stored with CompileCache::store, so the fuzzer's bytes reach
//         unpack_objects behind a valid header and checksum.
// The reader never throws: every input is a hit, a miss or `damaged`. A hit's payload is the
// bytes after the 32-byte header, and a stored payload loads back as it was. unpack_objects
// either refuses or returns objects that pack back to the payload.
#include "fuzz_util.h"
#include "jit/cpu/compile_cache.h"

namespace {

namespace fz = towerjit::fuzz;
using towerjit::cpujit::CompileCache;

void check_unpack(std::string_view payload) {
  const std::vector<std::string> objects = towerjit::cpujit::unpack_objects(payload);
  if (!objects.empty() && towerjit::cpujit::pack_objects(objects) != payload)
    fz::finding("unpacked objects do not pack back to the payload");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const CompileCache cache((fz::scratch_dir() / "cache").string());
  static const std::string key = towerjit::cpujit::make_cache_key({"fuzz"});
  fz::Bytes in(data, size);
  const bool store = in.u8() & 1;
  const std::string_view bytes = in.rest();
  if (store) {
    if (!cache.store(key, bytes)) fz::finding("cannot store an entry in " + cache.dir());
  } else {
    std::filesystem::create_directories(cache.dir());
    fz::write_file(cache.entry_path(key), bytes);
  }
  const CompileCache::Lookup hit = cache.load(key);
  if (hit.status != CompileCache::Status::hit) {
    if (store) fz::finding("a stored entry does not load");
    if (!hit.payload.empty()) fz::finding("a miss or a damaged entry came with a payload");
    return 0;
  }
  const std::string_view expected = store ? bytes : bytes.substr(32);
  if (hit.payload != expected) fz::finding("a hit's payload is not the stored bytes");
  check_unpack(hit.payload);
  return 0;
}
