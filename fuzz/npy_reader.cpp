// Fuzz target: the .npy and .npz readers (runtime/data/npy.cpp, npz.cpp), through load_npy and
// load_npz on a real file, as a user's data reaches them. The first byte chooses how the rest is
// read:
//   0 mod 3: as an .npy file;
//   1 mod 3: as an .npz archive (the fuzzer mutates the zip structure directly);
//   2 mod 3: as one .npy member of a deflated archive the target builds, so mutations of the
//            .npy bytes also reach the reader behind zlib's inflate.
// Any input either reads or raises towerjit::Error. What reads must hold as many values as its
// shape says, in one of towerjit's two dtypes.
#include "fuzz_util.h"
#include "runtime/data/npy.h"
#include "runtime/data/npz.h"
#include "tests/runtime/interop_bytes.h"

namespace {

namespace fz = towerjit::fuzz;

void check_result(const towerjit::HostTensor& t) {
  const size_t held = t.dtype == towerjit::DType::f32 ? t.f32.size() : t.i32.size();
  if (held != static_cast<size_t>(t.size())) fz::finding("the values do not fill the shape");
  if (t.dtype != towerjit::DType::f32 && t.dtype != towerjit::DType::i32) fz::finding("a dtype other than f32 or i32");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz::Bytes in(data, size);
  const int mode = in.u8() % 3;
  const std::string rest(in.rest());
  const std::string path = (fz::scratch_dir() / (mode == 0 ? "data.npy" : "data.npz")).string();
  fz::write_file(path, mode == 2 ? towerjit::testing::zip_bytes({{"a.npy", rest}}, true) : rest);
  try {
    if (mode == 0) {
      check_result(towerjit::data::load_npy(path));
    } else {
      for (const auto& [name, t] : towerjit::data::load_npz(path)) check_result(t);
    }
  } catch (const towerjit::Error& e) {
    fz::expect_user_error(e);
  }
  return 0;
}
